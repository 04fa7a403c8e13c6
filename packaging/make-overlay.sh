#!/usr/bin/env bash
# make-overlay.sh: a local Portage overlay to emerge gkeys-portage from, made from this checkout.
#
# usage: packaging/make-overlay.sh [--distdir DIR] [--git-url URL] [--python PY] OVERLAY-DIR
#   OVERLAY-DIR  where the overlay is written (created; an existing overlay made by this script is replaced)
#   --distdir    also copy the release tarball there (Portage's DISTDIR: "$(portageq distdir)")
#   --git-url    the repository the live ebuild (9999) builds from (default: this checkout, file://)
#   --python     the interpreter that builds the sdist (default: python3; needs setuptools >= 64)
#
# The overlay holds:
#   profiles/repo_name, metadata/layout.conf    repository gkeys-portage-local, masters = gentoo
#   app-crypt/gkeys-portage/                    the ebuilds, metadata.xml and the Manifest (DIST line of the tarball)
#   distfiles/gkeys-portage-VERSION.tar.gz      the release tarball: the sdist of this checkout (top dir ${P})
# The project publishes no tarball (no PyPI upload): the versioned ebuild is RESTRICT=fetch and takes the tarball
# from DISTDIR. Then, as root:
#   echo -e '[gkeys-portage-local]\nlocation = OVERLAY-DIR' > /etc/portage/repos.conf/gkeys-portage-local.conf
#   emerge --ask app-crypt/gkeys-portage        # dev-python/pysequoia comes from ::gentoo (~amd64)
set -euo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
distdir= git_url= python=python3 overlay=
while [[ $# -gt 0 ]]; do
	case $1 in
		--distdir) distdir=${2:?}; shift 2 ;;
		--git-url) git_url=${2:?}; shift 2 ;;
		--python) python=${2:?}; shift 2 ;;
		-h|--help) usage ;;
		-*) echo "make-overlay.sh: unknown option $1" >&2; usage ;;
		*) [[ -z ${overlay} ]] || usage; overlay=$1; shift ;;
	esac
done
[[ -n ${overlay} ]] || usage

checkout=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=$("${python}" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
	"${checkout}/pyproject.toml")
git_url=${git_url:-file://${checkout}}
package=app-crypt/gkeys-portage
tarball=gkeys-portage-${version}.tar.gz  # ${P}.tar.gz, as the ebuild's SRC_URI names it

if [[ -e ${overlay} ]]; then
	[[ -f ${overlay}/profiles/repo_name && $(cat "${overlay}/profiles/repo_name") == gkeys-portage-local ]] || {
		echo "make-overlay.sh: ${overlay} exists and is not an overlay made by this script" >&2; exit 1; }
	rm -rf "${overlay}"
fi

# 1. The release tarball: the sdist, built from a copy of the checkout (the build leaves nothing in the checkout).
work=$(mktemp -d -t gkeys-overlay.XXXXXX)
trap 'rm -rf "${work}"' EXIT
tar -C "${checkout}" --exclude=.git --exclude=__pycache__ --exclude='*.egg-info' --exclude=build --exclude=dist \
	-cf - . | tar -C "${work}" -xf - --one-top-level=src
(cd "${work}/src" && "${python}" -c 'import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])' \
	"${work}/dist" >/dev/null 2>&1)
# The sdist's name and top directory follow the setuptools version (gkeys_portage-V or gkeys-portage-V): the
# tarball holds the same files under ${P}/, the directory the ebuild unpacks into.
"${python}" - "${work}/dist" "${work}/${tarball}" <<-'EOF'
	import io, pathlib, sys, tarfile
	sdist, = pathlib.Path(sys.argv[1]).glob("*.tar.gz")
	top = pathlib.Path(sys.argv[2]).name.removesuffix(".tar.gz")
	with tarfile.open(sdist) as src, tarfile.open(sys.argv[2], "w:gz") as out:
	    for member in src.getmembers():
	        data = src.extractfile(member) if member.isfile() else None
	        member.name = top + member.name[member.name.index("/"):] if "/" in member.name else top
	        out.addfile(member, io.BytesIO(data.read()) if data else None)
EOF

# 2. The overlay: a repository of its own whose master is ::gentoo (eclasses, dev-python/pysequoia, ...).
mkdir -p "${overlay}/profiles" "${overlay}/metadata" "${overlay}/${package}" "${overlay}/distfiles"
echo gkeys-portage-local > "${overlay}/profiles/repo_name"
cat > "${overlay}/metadata/layout.conf" <<-EOF
	masters = gentoo
	thin-manifests = true
	sign-manifests = false
	manifest-hashes = BLAKE2B SHA512
	manifest-required-hashes = BLAKE2B
EOF
cp "${checkout}/packaging/gentoo/${package}/metadata.xml" "${checkout}/packaging/gentoo/${package}/gkeys-portage-${version}.ebuild" \
	"${overlay}/${package}/"
sed -e "s|^EGIT_REPO_URI=.*|EGIT_REPO_URI=\"${git_url}\"|" "${checkout}/packaging/gentoo/${package}/gkeys-portage-9999.ebuild" \
	> "${overlay}/${package}/gkeys-portage-9999.ebuild"
cp "${work}/${tarball}" "${overlay}/distfiles/"

# 3. The Manifest: the tarball's DIST line, as 'ebuild … manifest' writes it under this layout.conf.
"${python}" - "${overlay}/distfiles/${tarball}" "${overlay}/${package}/Manifest" <<-'EOF'
	import hashlib, os, sys
	data = open(sys.argv[1], "rb").read()
	with open(sys.argv[2], "w") as out:
	    out.write(f"DIST {os.path.basename(sys.argv[1])} {len(data)} "
	              f"BLAKE2B {hashlib.blake2b(data).hexdigest()} SHA512 {hashlib.sha512(data).hexdigest()}\n")
EOF
if [[ -n ${distdir} ]]; then
	mkdir -p "${distdir}"
	cp "${overlay}/distfiles/${tarball}" "${distdir}/"
fi
echo "overlay: ${overlay} (${package}-${version} from ${tarball}; live ebuild from ${git_url})"
