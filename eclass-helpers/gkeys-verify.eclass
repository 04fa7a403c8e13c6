# Copyright 2026 Gentoo Authors
# Distributed under the terms of the GNU General Public License v2

# @ECLASS: gkeys-verify.eclass
# @SUPPORTED_EAPIS: 7 8
# @BLURB: verify distfile signatures against keys managed by gkeys (by category and nick)
# @DESCRIPTION:
# The interface of verify-sig.eclass, with the keys taken from the keyrings that gkeys manages
# instead of a key file shipped in a package: an upstream signature counts only if gkeys reports a
# good signature whose primary key fingerprint is pinned by a seed of GKEYS_VERIFY_CATEGORY (or by
# the one seed GKEYS_VERIFY_NICK).  Verification happens when USE=verify-sig is set; a user turns
# it off with USE=-verify-sig.
#
# The ebuild environment has no network, so the keys must already be installed on the build host
# (gkeys update-seed -C CATEGORY, or gkeys install-key -C CATEGORY -n NICK).  If they are not, the
# build dies with a message that names the command to run.
#
# The eclass exports src_unpack: every distfile in ${A} must have its FILE.asc, FILE.sig or
# FILE.sign beside it in ${A} (distfiles listed in GKEYS_VERIFY_UNSIGNED excepted); all of them are
# verified first, then default_src_unpack runs.
# @EXAMPLE:
#
# @CODE
# inherit gkeys-verify
#
# SRC_URI="https://example.org/${P}.tar.xz
#	verify-sig? ( https://example.org/${P}.tar.xz.asc )"
#
# GKEYS_VERIFY_CATEGORY=upstream
# GKEYS_VERIFY_NICK=example-release
# @CODE
#
# Checksums signed as a whole (a clearsigned SHA256SUMS.asc) instead of one signature per file:
#
# @CODE
# src_unpack() {
#	if use verify-sig; then
#		gkeys-verify_verify_signed_checksums \
#			"${DISTDIR}/${P}-SHA256SUMS.asc" sha256 "${P}.tar.xz"
#	fi
#	unpack "${P}.tar.xz"
# }
# @CODE

case ${EAPI} in
	7|8) ;;
	*) die "${ECLASS}: EAPI ${EAPI:-0} not supported" ;;
esac

if [[ -z ${_GKEYS_VERIFY_ECLASS} ]]; then
_GKEYS_VERIFY_ECLASS=1

IUSE="verify-sig"

# @ECLASS_VARIABLE: GKEYS_VERIFY_PACKAGE
# @PRE_INHERIT
# @DESCRIPTION:
# The package that provides the gkeys command; added to BDEPEND under USE=verify-sig.
: "${GKEYS_VERIFY_PACKAGE:=app-crypt/gkeys-portage}"

BDEPEND="verify-sig? ( ${GKEYS_VERIFY_PACKAGE} )"

# @ECLASS_VARIABLE: GKEYS_VERIFY_CATEGORY
# @REQUIRED
# @DESCRIPTION:
# The gkeys seed category whose keyring and pinned fingerprints decide (e.g. gentoo, gentoo-devs,
# or a category of upstream release keys).

# @ECLASS_VARIABLE: GKEYS_VERIFY_NICK
# @DEFAULT_UNSET
# @DESCRIPTION:
# Accept only the keys of this one seed of GKEYS_VERIFY_CATEGORY.  Unset: any seed of the category.

# @ECLASS_VARIABLE: GKEYS_VERIFY_UNSIGNED
# @DEFAULT_UNSET
# @DESCRIPTION:
# Space-separated glob patterns of distfiles that upstream does not sign (patches, extra data);
# gkeys-verify_src_unpack unpacks them without asking for a signature.

# @ECLASS_VARIABLE: GKEYS_VERIFY_COMMAND
# @USER_VARIABLE
# @DESCRIPTION:
# The gkeys command (words split on spaces).  Default: gkeys.
: "${GKEYS_VERIFY_COMMAND:=gkeys}"

# @ECLASS_VARIABLE: GKEYS_VERIFY_CONFIG
# @USER_VARIABLE
# @DEFAULT_UNSET
# @DESCRIPTION:
# A gkeys configuration file (gkeys -c FILE).  Unset: gkeys' default (${EPREFIX}/etc/gkeys/gkeys.conf).

# @ECLASS_VARIABLE: GKEYS_VERIFY_SPOOL
# @USER_VARIABLE
# @DESCRIPTION:
# The journal spool of gkeys' state directory, where each verdict is left for root's trust journal
# (gkeys audit lists the distfiles a build verified once root took them in: gkeys journal ingest, or
# any gkeys command run as root).  The eclass allows the build to write there (addwrite) and nowhere
# else.  Set it when gkeysdir is not the default; empty: verdicts are not left for the journal.
: "${GKEYS_VERIFY_SPOOL=${EPREFIX}/var/lib/gkeys/state/journal-spool}"

# @FUNCTION: _gkeys-verify_gkeys
# @INTERNAL
# @USAGE: <gkeys arguments>...
# @DESCRIPTION:
# Run gkeys; its combined output is left in _GKEYS_VERIFY_OUTPUT; returns gkeys' exit status.
_gkeys-verify_gkeys() {
	local -a cmd
	read -r -a cmd <<<"${GKEYS_VERIFY_COMMAND}"
	[[ -n ${GKEYS_VERIFY_CONFIG} ]] && cmd+=( -c "${GKEYS_VERIFY_CONFIG}" )
	local spool=
	if [[ -n ${GKEYS_VERIFY_SPOOL} && -d ${GKEYS_VERIFY_SPOOL} && ! -L ${GKEYS_VERIFY_SPOOL} ]] \
			&& declare -F addwrite >/dev/null; then
		addwrite "${GKEYS_VERIFY_SPOOL}"
		spool=${GKEYS_VERIFY_SPOOL}
	fi
	# Verify from the exported keyring in a throwaway home under ${T}: never write into the live one;
	# the verdict goes to the spool the sandbox now allows (root verifies it again before journaling).
	_GKEYS_VERIFY_OUTPUT=$(GKEYS_READ_ONLY_KEYRINGS=1 GKEYS_JOURNAL_SPOOL=${spool} "${cmd[@]}" "$@" 2>&1)
}

# @FUNCTION: _gkeys-verify_scope
# @INTERNAL
# @USAGE: <category> [<nick>]
# @DESCRIPTION:
# Set _GKEYS_VERIFY_SCOPE to the gkeys options (-C CATEGORY [-n NICK]); die without a category.
_gkeys-verify_scope() {
	[[ -n ${1} ]] || die "${ECLASS}: GKEYS_VERIFY_CATEGORY is not set (the gkeys category whose keys sign ${PN})"
	_GKEYS_VERIFY_SCOPE=( -C "${1}" )
	[[ -n ${2} ]] && _GKEYS_VERIFY_SCOPE+=( -n "${2}" )
	return 0
}

# @FUNCTION: _gkeys-verify_die
# @INTERNAL
# @USAGE: <what> <status> <category> [<nick>]
# @DESCRIPTION:
# Die after a failed gkeys run over <what>: with the install commands if the keys are not
# installed, otherwise with gkeys' own one-line reason.
_gkeys-verify_die() {
	local what=${1} status=${2} cat=${3} nick=${4}
	local reason=${_GKEYS_VERIFY_OUTPUT##*$'\n'}
	reason=${reason# \* }
	if [[ ${status} == 127 ]]; then
		die "${ECLASS}: '${GKEYS_VERIFY_COMMAND}' not found: install ${GKEYS_VERIFY_PACKAGE} or build with USE=-verify-sig"
	fi
	if ! _gkeys-verify_gkeys --json list-key "${_GKEYS_VERIFY_SCOPE[@]}" \
			|| [[ ! ${_GKEYS_VERIFY_OUTPUT} =~ \"installed\":\ *true ]]; then
		die "${ECLASS}: cannot verify ${what}: the keys of gkeys ${cat}${nick:+/${nick}} are not installed" \
			"(builds have no network). As root run: gkeys update-seed -C ${cat}" \
			"(or: gkeys install-key -C ${cat}${nick:+ -n ${nick}}), or build with USE=-verify-sig"
	fi
	die "${ECLASS}: ${what}: NOT verified: ${reason:-gkeys exit status ${status}}"
}

# @FUNCTION: gkeys-verify_verify_detached
# @USAGE: <file> <sig-file> [<category> [<nick>]]
# @DESCRIPTION:
# Verify <file> against the detached signature <sig-file> with the keys of <category> (default
# GKEYS_VERIFY_CATEGORY), only those of <nick> if given (default GKEYS_VERIFY_NICK).  Dies unless
# gkeys reports a good signature by a pinned key.
gkeys-verify_verify_detached() {
	local file=${1} sig=${2} cat=${3-${GKEYS_VERIFY_CATEGORY}} nick=${4-${GKEYS_VERIFY_NICK}}
	[[ -n ${file} && -n ${sig} ]] || die "${FUNCNAME}: usage: ${FUNCNAME} FILE SIG [CATEGORY [NICK]]"
	[[ -f ${file} ]] || die "${FUNCNAME}: ${file}: no such file"
	[[ -f ${sig} ]] || die "${FUNCNAME}: ${file##*/}: signature ${sig} is missing"
	_gkeys-verify_scope "${cat}" "${nick}"

	ebegin "Verifying ${file##*/} with gkeys ${cat}${nick:+/${nick}}"
	_gkeys-verify_gkeys verify -F "${file}" -s "${sig}" "${_GKEYS_VERIFY_SCOPE[@]}"
	local status=$?
	eend ${status} || _gkeys-verify_die "${file##*/}" ${status} "${cat}" "${nick}"
}

# @FUNCTION: gkeys-verify_verify_message
# @USAGE: <file> <output-file> [<category> [<nick>]]
# @DESCRIPTION:
# Verify the inline-signed (clearsigned) message <file> and write the signed text to
# <output-file> ("-" for stdout).  Nothing is written unless the signature verified; text outside
# the signed part never reaches the output.
gkeys-verify_verify_message() {
	local file=${1} out=${2} cat=${3-${GKEYS_VERIFY_CATEGORY}} nick=${4-${GKEYS_VERIFY_NICK}}
	[[ -n ${file} && -n ${out} ]] || die "${FUNCNAME}: usage: ${FUNCNAME} FILE OUT [CATEGORY [NICK]]"
	[[ -f ${file} ]] || die "${FUNCNAME}: ${file}: no such file"
	_gkeys-verify_scope "${cat}" "${nick}"

	local target=${out}
	[[ ${out} == - ]] && target="${T}/${file##*/}.gkeys-verify.$$"
	ebegin "Verifying ${file##*/} with gkeys ${cat}${nick:+/${nick}}"
	_gkeys-verify_gkeys verify -F "${file}" -o "${target}" "${_GKEYS_VERIFY_SCOPE[@]}"
	local status=$?
	eend ${status} || _gkeys-verify_die "${file##*/}" ${status} "${cat}" "${nick}"
	if [[ ${out} == - ]]; then
		cat "${target}" || die "${FUNCNAME}: cannot read ${target}"
		rm -f "${target}"
	fi
}

# @FUNCTION: _gkeys-verify_hash_tool
# @INTERNAL
# @USAGE: <algo>
# @DESCRIPTION:
# Set _GKEYS_VERIFY_TOOL, _GKEYS_VERIFY_HEXLEN and _GKEYS_VERIFY_TAG for <algo>; die if unsupported.
_gkeys-verify_hash_tool() {
	case ${1} in
		sha256) _GKEYS_VERIFY_TOOL=sha256sum _GKEYS_VERIFY_HEXLEN=64 _GKEYS_VERIFY_TAG=SHA256 ;;
		sha512) _GKEYS_VERIFY_TOOL=sha512sum _GKEYS_VERIFY_HEXLEN=128 _GKEYS_VERIFY_TAG=SHA512 ;;
		blake2b) _GKEYS_VERIFY_TOOL=b2sum _GKEYS_VERIFY_HEXLEN=128 _GKEYS_VERIFY_TAG=BLAKE2B ;;
		*) die "${ECLASS}: checksum algorithm '${1}' is not supported (sha256, sha512, blake2b)" ;;
	esac
}

# @FUNCTION: gkeys-verify_verify_unsigned_checksums
# @USAGE: <checksum-file> <algo> <files>
# @DESCRIPTION:
# Check every file of the space-separated list <files> (names as in ${A}: relative to ${DISTDIR},
# or absolute paths) against <checksum-file>, which is NOT verified here (see
# gkeys-verify_verify_signed_checksums).  Understands "HASH  NAME" / "HASH *NAME" lines, BSD
# "ALGO (NAME) = HASH" lines, and Gentoo DIGESTS sections ("# SHA512 HASH" headers: lines in
# another algorithm's section are skipped).  Dies if a file is missing from the list, listed with
# two different hashes, or does not match, and if <files> names no file at all.
gkeys-verify_verify_unsigned_checksums() {
	local checksums=${1} algo=${2} files=${3}
	[[ -n ${files//[[:space:]]} ]] || die "${FUNCNAME}: no files to check against ${checksums##*/}" \
		"(an empty list would verify nothing)"
	[[ -f ${checksums} ]] || die "${FUNCNAME}: ${checksums}: no such file"
	_gkeys-verify_hash_tool "${algo}"
	local -A expected=()
	local line hash name section=
	while IFS= read -r line || [[ -n ${line} ]]; do
		line=${line%$'\r'}
		if [[ ${line} =~ ^#\ *([A-Za-z0-9]+)\ +HASH\ *$ ]]; then
			section=${BASH_REMATCH[1]^^}
			continue
		fi
		if [[ ${line} =~ ^([A-Za-z0-9-]+)\ \((.+)\)\ =\ ([0-9a-fA-F]+)$ ]]; then
			[[ ${BASH_REMATCH[1]^^} == "${_GKEYS_VERIFY_TAG}" ]] || continue
			name=${BASH_REMATCH[2]} hash=${BASH_REMATCH[3]}
		elif [[ ${line} =~ ^([0-9a-fA-F]+)\ [\ *](.+)$ ]]; then
			[[ -z ${section} || ${section} == "${_GKEYS_VERIFY_TAG}" ]] || continue
			hash=${BASH_REMATCH[1]} name=${BASH_REMATCH[2]}
		else
			continue
		fi
		(( ${#hash} == _GKEYS_VERIFY_HEXLEN )) || continue
		hash=${hash,,}
		if [[ -n ${expected[${name}]} && ${expected[${name}]} != "${hash}" ]]; then
			die "${FUNCNAME}: ${checksums##*/} lists ${name} twice with different ${algo} hashes"
		fi
		expected[${name}]=${hash}
	done < "${checksums}"

	local f path actual checked=0
	for f in ${files}; do
		[[ ${f} == /* ]] && path=${f} || path=${DISTDIR}/${f}
		name=${f##*/}
		[[ -n ${expected[${name}]} ]] || die "${FUNCNAME}: ${name}: no ${algo} checksum in ${checksums##*/}"
		[[ -f ${path} ]] || die "${FUNCNAME}: ${path}: no such file"
		ebegin "Checking ${algo} of ${name}"
		actual=$("${_GKEYS_VERIFY_TOOL}" < "${path}")
		actual=${actual%% *}
		[[ ${actual} == "${expected[${name}]}" ]]
		eend $? || die "${FUNCNAME}: ${name}: ${algo} checksum mismatch (NOT verified)"
		checked=$(( checked + 1 ))
	done
	(( checked > 0 )) || die "${FUNCNAME}: no file checked against ${checksums##*/} (NOT verified)"
}

# @FUNCTION: gkeys-verify_verify_signed_checksums
# @USAGE: <checksum-file> <algo> <files> [<category> [<nick>]]
# @DESCRIPTION:
# Verify the clearsigned <checksum-file> with gkeys, then check every file of the space-separated
# list <files> against the signed text only (see gkeys-verify_verify_unsigned_checksums).
gkeys-verify_verify_signed_checksums() {
	local checksums=${1} algo=${2} files=${3} cat=${4-${GKEYS_VERIFY_CATEGORY}} nick=${5-${GKEYS_VERIFY_NICK}}
	[[ -n ${checksums} && -n ${algo} && -n ${files//[[:space:]]} ]] \
		|| die "${FUNCNAME}: usage: ${FUNCNAME} CHECKSUMS ALGO FILES [CATEGORY [NICK]]"
	_gkeys-verify_hash_tool "${algo}"
	local text="${T}/${checksums##*/}.verified"
	gkeys-verify_verify_message "${checksums}" "${text}" "${cat}" "${nick}"
	gkeys-verify_verify_unsigned_checksums "${text}" "${algo}" "${files}"
}

# @FUNCTION: _gkeys-verify_unsigned_ok
# @INTERNAL
# @USAGE: <distfile>
# @DESCRIPTION:
# True if <distfile> matches a pattern of GKEYS_VERIFY_UNSIGNED.
_gkeys-verify_unsigned_ok() {
	local pattern
	for pattern in ${GKEYS_VERIFY_UNSIGNED}; do
		# shellcheck disable=SC2053
		[[ ${1} == ${pattern} ]] && return 0
	done
	return 1
}

# @FUNCTION: gkeys-verify_src_unpack
# @DESCRIPTION:
# With USE=verify-sig: pair each distfile of ${A} with its .asc/.sig/.sign in ${A} and verify it
# (dies on a missing or bad signature; GKEYS_VERIFY_UNSIGNED lists exceptions).  Then
# default_src_unpack.
gkeys-verify_src_unpack() {
	if use verify-sig; then
		local f ext sig
		for f in ${A}; do
			case ${f} in
				*.asc|*.sig|*.sign) continue ;;
			esac
			_gkeys-verify_unsigned_ok "${f}" && continue
			sig=
			for ext in asc sig sign; do
				if has "${f}.${ext}" ${A}; then
					sig=${f}.${ext}
					break
				fi
			done
			[[ -n ${sig} ]] || die "${ECLASS}: ${f} has no signature in SRC_URI (add ${f}.asc under" \
				"verify-sig?, or list ${f} in GKEYS_VERIFY_UNSIGNED)"
			gkeys-verify_verify_detached "${DISTDIR}/${f}" "${DISTDIR}/${sig}"
		done
	fi
	default_src_unpack
}

fi

EXPORT_FUNCTIONS src_unpack
