# Copyright 2026 Gentoo Authors
# Distributed under the terms of the GNU General Public License v2

# Shipped beside gkeys-portage for a tree without dev-python/pysequoia: gkeys' second opinion (Sequoia confirms
# every signature GnuPG accepts, docs/engines.md) needs it.  The crate dependencies come from a vendored
# tarball made with "cargo vendor" from the sdist's Cargo.lock (pycargoebuild can turn it into CRATES=).

EAPI=8

DISTUTILS_EXT=1
DISTUTILS_USE_PEP517=maturin
PYTHON_COMPAT=( python3_{11..13} )

RUST_MIN_VER="1.82.0"

inherit cargo distutils-r1 pypi

DESCRIPTION="Python bindings to Sequoia PGP, an OpenPGP implementation in Rust"
HOMEPAGE="
	https://codeberg.org/wiktor/pysequoia
	https://pypi.org/project/pysequoia/
"
SRC_URI+=" https://distfiles.gentoo.org/gkeys-portage/${P}-crates.tar.xz"

LICENSE="Apache-2.0"
# Dependent crate licenses
LICENSE+=" Apache-2.0 BSD-2 BSD ISC LGPL-2+ MIT Unicode-3.0 Unicode-DFS-2016 ZLIB"
SLOT="0"
KEYWORDS="~amd64"

DEPEND="
	dev-libs/gmp:=
	dev-libs/nettle:=
"
RDEPEND="${DEPEND}"
BDEPEND="
	dev-util/maturin
	llvm-core/clang
	virtual/pkgconfig
"

# cargo_src_unpack (exported by cargo.eclass) unpacks the sdist and the vendored crates.
QA_FLAGS_IGNORED="usr/lib.*/py.*/site-packages/pysequoia/pysequoia.*.so"

