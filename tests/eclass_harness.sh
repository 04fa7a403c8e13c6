# Test harness: the ebuild helper functions an eclass relies on, reduced to what the tests need.
#
# Source this, set EAPI, A, USE, DISTDIR, WORKDIR, T, then source the eclass.  die prints one
# "DIE: ..." line on stderr and exits 1 (like Portage, it ends the whole "phase"); unpack records
# "UNPACKED: name" on stdout and extracts tarballs into WORKDIR.  use() refuses flags missing from
# IUSE, as Portage's strict IUSE checking does.

: "${EAPI:=8}" "${CATEGORY:=app-misc}" "${PN:=demo}" "${PV:=1.0}" "${PORTAGE_REPO_NAME:=test}"
: "${P:=${PN}-${PV}}" "${PF:=${P}}"
ECLASS=

die() {
	echo "DIE: ${*:-(no error message)}" >&2
	exit 1
}

einfo() { echo " * $*" >&2; }
ewarn() { echo " * WARNING: $*" >&2; }
eerror() { echo " * ERROR: $*" >&2; }

ebegin() { echo " * $* ..." >&2; }

# addwrite: Portage's sandbox helper (ebuild.sh); recorded so a test sees what a build was allowed to write.
addwrite() { echo "ADDWRITE: $*" >&2; SANDBOX_WRITE="${SANDBOX_WRITE:+${SANDBOX_WRITE}:}$*"; }

eend() {
	local status=${1:-0}
	shift
	if (( status == 0 )); then
		echo " [ ok ]" >&2
	else
		echo " [ !! ] $*" >&2
	fi
	return "${status}"
}

has() {
	local needle=${1} item
	shift
	for item in "$@"; do
		[[ ${item} == "${needle}" ]] && return 0
	done
	return 1
}

use() {
	local flag=${1#!} known=0 item
	for item in ${IUSE}; do
		[[ ${item#[+-]} == "${flag}" ]] && known=1
	done
	(( known )) || die "use: USE flag '${flag}' not in IUSE"
	if has "${flag}" ${USE}; then
		[[ ${1} != !* ]]
	else
		[[ ${1} == !* ]]
	fi
}

unpack() {
	local f
	for f in "$@"; do
		echo "UNPACKED: ${f}"
		case ${f} in
			*.tar|*.tar.gz|*.tgz|*.tar.xz|*.tar.bz2) tar -xf "${DISTDIR}/${f}" -C "${WORKDIR}" || die "unpack: ${f} failed" ;;
		esac
	done
}

default_src_unpack() {
	[[ -n ${A} ]] && unpack ${A}
	return 0
}

# inherit: source eclass-helpers/NAME.eclass from ECLASSDIR with ECLASS set, as ebuild.sh does.
EXPORT_FUNCTIONS() {
	local phase
	for phase in "$@"; do
		eval "${phase}() { ${ECLASS}_${phase} \"\$@\"; }"
	done
}

inherit() {
	local name
	for name in "$@"; do
		ECLASS=${name}
		# shellcheck disable=SC1090
		source "${ECLASSDIR}/${name}.eclass" || die "inherit: ${name} failed"
	done
}
