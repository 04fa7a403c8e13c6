# Copyright 2026 Gentoo Authors
# Distributed under the terms of the GNU General Public License v2

EAPI=8

DISTUTILS_USE_PEP517=setuptools
PYTHON_COMPAT=( python3_{11..13} )

inherit distutils-r1 git-r3

DESCRIPTION="Pinned OpenPGP keyrings for Portage: verified emerge --sync, release media and overlays"
HOMEPAGE="https://github.com/gentoo/gkeys-portage"
EGIT_REPO_URI="https://github.com/gentoo/gkeys-portage.git"

LICENSE="GPL-2"
SLOT="0"

RDEPEND="
	app-crypt/gnupg
	dev-vcs/git
	sys-apps/portage[${PYTHON_USEDEP}]
	>=dev-python/python-gnupg-0.5[${PYTHON_USEDEP}]
	>=dev-python/requests-2.28[${PYTHON_USEDEP}]
	>=dev-python/defusedxml-0.7[${PYTHON_USEDEP}]
	>=app-portage/gemato-20[${PYTHON_USEDEP}]
	>=dev-python/pysequoia-0.1.35[${PYTHON_USEDEP}]
	net-misc/rsync
"

# The wheel installs the package and, as data files, everything gkeys_portage/installfiles.py lists
# under /usr/share: hooks, the eclass (/usr/share/gkeys-portage/eclass), the bashrc snippet, the sample
# config, man pages, bash completion and the gkeys-refresh systemd units.  The same list names the files
# for /etc (the configuration, the cron.daily refresh script; executable sources are installed with doexe).
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
}

pkg_postinst() {
	elog "To make Portage verify with gkeys, install the seeds and keys, then wire Portage:"
	elog "    gkeys update-seed            # every category, the authority keys before the developers"
	elog "    (offline: Gentoo's key files as [keyrings] files, docs/portage.md 'Offline first install')"
	elog "    gkeys setup-portage          # hooks, repos.conf (::gentoo on sync-type = gkeys)"
	elog "    gkeys doctor                 # what would still make verification fail or be skipped"
	elog "The eclass for overlays is in ${EPREFIX}/usr/share/gkeys-portage/eclass."
	elog "Keys are refreshed off the sync path, daily: with systemd, enable the timer:"
	elog "    systemctl enable --now gkeys-refresh.timer"
	elog "otherwise ${EPREFIX}/etc/cron.daily/gkeys-refresh does it (needs a cron daemon)."
}
