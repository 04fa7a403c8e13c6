# Copyright 2026 Gentoo Authors
# Distributed under the terms of the GNU General Public License v2

EAPI=8

DISTUTILS_USE_PEP517=setuptools
PYTHON_COMPAT=( python3_{11..13} )

inherit distutils-r1 systemd

DESCRIPTION="Pinned OpenPGP keyrings for Portage: verified emerge --sync, release media and overlays"
HOMEPAGE="https://wiki.gentoo.org/wiki/Project:Gentoo-keys"
# Not published (no PyPI upload, no release URL): the release tarball is the sdist of a checkout, which
# packaging/make-overlay.sh builds and puts beside this ebuild in a local overlay, with its Manifest, and into
# DISTDIR (see pkg_nofetch).
SRC_URI="${P}.tar.gz"
RESTRICT="fetch"
KEYWORDS="~amd64"

LICENSE="GPL-2"
SLOT="0"
IUSE="ldap"
# The suite needs what Portage's sandbox and network-sandbox refuse: real gpg-agents in its own GnuPG homes,
# git and rsync daemons, slapd and HTTP servers on 127.0.0.1, emerge in throwaway configuration roots. Run it
# from a checkout: pip install ".[test]" ./portage-sync-module && python3 -m pytest -q (README.md).
RESTRICT+=" test"

# ::gentoo's dev-python/pysequoia (0.1.35, ~amd64): the second opinion on every signature.
RDEPEND="
	app-crypt/gnupg
	dev-vcs/git
	net-misc/rsync
	sys-apps/portage[${PYTHON_USEDEP}]
	>=dev-python/python-gnupg-0.5[${PYTHON_USEDEP}]
	>=dev-python/requests-2.28[${PYTHON_USEDEP}]
	>=dev-python/defusedxml-0.7[${PYTHON_USEDEP}]
	>=app-portage/gemato-20[${PYTHON_USEDEP}]
	>=dev-python/pysequoia-0.1.35[${PYTHON_USEDEP}]
	ldap? ( >=dev-python/ldap3-2.9[${PYTHON_USEDEP}] )
"

# Installed by hand below, not through DOCS: the wheel puts README, SECURITY and docs/*.md into
# /usr/share/doc/gkeys-portage, which messages and man pages name.
DOCS=()

pkg_nofetch() {
	einfo "${A} (the sdist of gkeys-portage ${PV}) is not published. From a gkeys-portage checkout, run"
	einfo "    packaging/make-overlay.sh --distdir \"\$(portageq distdir)\" /var/db/repos/gkeys-local"
	einfo "which builds it, puts it into DISTDIR and writes a local overlay with this ebuild and its Manifest;"
	einfo "or copy the overlay's distfiles/${A} into ${DISTDIR}."
}

# The wheel installs the package and, as data files, everything gkeys_portage/installfiles.py lists under
# /usr/share: hooks, the eclass (/usr/share/gkeys-portage/eclass), the bashrc snippet, the sample config,
# man pages, bash completion and the documentation. The same list names the files for /etc (the
# configuration, the cron.daily refresh script; executable sources are installed with doexe) and the
# systemd units (systemd_dounit, with ${EPREFIX} in their paths).
# The Portage sync module leaf (portage/sync/modules/gkeys, a distribution of its own for pip so that
# nothing named "portage" exists without Portage) goes into Portage's directory: RDEPEND has Portage.
python_install() {
	distutils-r1_python_install
	python_moduleinto portage/sync/modules/gkeys
	python_domodule portage-sync-module/gkeys/__init__.py portage-sync-module/gkeys/gkeyssync.py
}

python_install_all() {
	distutils-r1_python_install_all
	python_setup
	local listing src dst
	listing=$("${EPYTHON}" gkeys_portage/installfiles.py etc) || die "installfiles.py failed"
	while IFS=$'\t' read -r src dst; do
		[[ -n ${src} ]] || continue
		if [[ -x ${src} ]]; then
			exeinto "/${dst}"
			doexe "${src}"
		else
			insinto "/${dst}"
			doins "${src}"
		fi
	done <<< "${listing}"
	listing=$("${EPYTHON}" gkeys_portage/installfiles.py systemd) || die "installfiles.py failed"
	while IFS=$'\t' read -r src dst; do
		[[ -n ${src} ]] || continue
		sed -e "s|^ExecStart=/|ExecStart=${EPREFIX}/|" -e "s|^ReadWritePaths=-/|ReadWritePaths=-${EPREFIX}/|" \
			"${src}" > "${T}/${src##*/}" || die
		systemd_dounit "${T}/${src##*/}"
	done <<< "${listing}"
	# the documentation where Gentoo keeps it, uncompressed so that the names messages give are the files
	mv "${ED}/usr/share/doc/gkeys-portage" "${ED}/usr/share/doc/${PF}" || die
	dosym "${PF}" /usr/share/doc/gkeys-portage
	docompress -x "/usr/share/doc/${PF}"
}

pkg_postinst() {
	elog "To make Portage verify with gkeys, install the seeds and keys, then wire Portage:"
	elog "    gkeys update-seed            # every category, the authority keys before the developers"
	elog "    (offline: Gentoo's key files as [keyrings] files,"
	elog "     ${EPREFIX}/usr/share/doc/gkeys-portage/portage.md 'Offline first install')"
	elog "    gkeys setup-portage          # hooks, repos.conf (::gentoo on sync-type = gkeys)"
	elog "    gkeys doctor                 # what would still make verification fail or be skipped"
	elog "The eclass for overlays is in ${EPREFIX}/usr/share/gkeys-portage/eclass."
	elog "Keys are refreshed off the sync path, daily: with systemd, enable the timer:"
	elog "    systemctl enable --now gkeys-refresh.timer"
	elog "otherwise ${EPREFIX}/etc/cron.daily/gkeys-refresh does it (needs a cron daemon)."
	use ldap || elog "gkeys-ldap (seeds from Gentoo's LDAP) needs USE=ldap (dev-python/ldap3)."
}
