# gkeys-portage: verify the distfiles of chosen packages before they are unpacked.
#
# Install (e.g. as /etc/portage/bashrc.d/gkeys.sh) and add to /etc/portage/bashrc:
#     source /etc/portage/bashrc.d/gkeys.sh
# (if your bashrc already defines pre_src_unpack, call gkeys_pre_src_unpack from it instead).
#
# /etc/portage/gkeys-verify.conf (or the file named by $GKEYS_VERIFY_CONF) lists the packages:
#     # ATOM                  CATEGORY[/NICK]    [DISTFILE-GLOB...]
#     app-misc/foo            upstream/foo
#     =dev-libs/bar-2*        upstream/bar       bar-*.tar.xz
#     net-misc/*::myoverlay   gentoo-devs
# ATOM is category/package (globs allowed), or =category/package-version (globs allowed), with an
# optional ::repository; any other atom (>=, <, ~, !) makes the build die.  The first matching line
# wins.  Every distfile of ${A} that matches a DISTFILE-GLOB (default: every distfile except
# signatures) must have FILE.asc, FILE.sig or FILE.sign in ${DISTDIR}, and gkeys must find a good
# signature by a key pinned by CATEGORY (or by its seed NICK); otherwise the build dies before
# src_unpack.  It also dies if the matching line selects no distfile of ${A}, or if the configuration
# file exists but cannot be read.  GKEYS_VERIFY=no (e.g. via package.env) skips
# the check; GKEYS_VERIFY_COMMAND and GKEYS_VERIFY_CONFIG work as in gkeys-verify.eclass.

# gkeys_verify_conf_path: the configuration file in use.
gkeys_verify_conf_path() {
	echo "${GKEYS_VERIFY_CONF:-${PORTAGE_CONFIGROOT%/}${EPREFIX}/etc/portage/gkeys-verify.conf}"
}

# gkeys_atom_matches ATOM: true if ATOM names the package being built.
gkeys_atom_matches() {
	local atom=${1} repo=
	if [[ ${atom} == *::* ]]; then
		repo=${atom##*::}
		atom=${atom%::*}
		[[ ${PORTAGE_REPO_NAME} == ${repo} ]] || return 1
	fi
	case ${atom} in
		=*) [[ ${CATEGORY}/${PF} == ${atom#=} || ${CATEGORY}/${P} == ${atom#=} ]] ;;
		[\<\>~!]*)
			# Never skip such a line: the package it means would then build unverified.
			die "gkeys: $(gkeys_verify_conf_path): atom '${1}' is not supported; supported atoms:" \
				"category/package, =category/package-version (globs allowed), each with an optional ::repository" ;;
		*) [[ ${CATEGORY}/${PN} == ${atom} ]] ;;
	esac
}

# gkeys_verify_lookup: set GKEYS_MATCH_SCOPE (CATEGORY[/NICK]) and GKEYS_MATCH_GLOBS from the first
# matching line of the configuration; false if no line matches.
gkeys_verify_lookup() {
	local conf atom scope globs
	conf=$(gkeys_verify_conf_path)
	[[ -e ${conf} ]] || return 1
	# A file that exists but cannot be read (0600 root under FEATURES=userpriv) must not turn every
	# check off silently.
	[[ -f ${conf} && -r ${conf} ]] || die "gkeys: ${conf} exists but cannot be read by the build user" \
		"(uid ${UID}; FEATURES=userpriv builds as portage): make it readable (chmod 0644), or remove it"
	# "|| [[ -n ${atom} ]]": a last line without a newline counts too.
	while read -r atom scope globs || [[ -n ${atom} ]]; do
		[[ -z ${atom} || ${atom} == \#* ]] && continue
		if gkeys_atom_matches "${atom}"; then
			GKEYS_MATCH_SCOPE=${scope}
			GKEYS_MATCH_GLOBS=${globs%%#*}
			return 0
		fi
	done < "${conf}"
	return 1
}

# gkeys_wants_signature DISTFILE: true if DISTFILE must be verified.
gkeys_wants_signature() {
	local glob
	case ${1} in
		*.asc|*.sig|*.sign) return 1 ;;
	esac
	[[ -z ${GKEYS_MATCH_GLOBS// } ]] && return 0
	for glob in ${GKEYS_MATCH_GLOBS}; do
		[[ ${1} == ${glob} ]] && return 0
	done
	return 1
}

# gkeys_pre_src_unpack: verify the distfiles of a listed package; die on anything short of good.
gkeys_pre_src_unpack() {
	[[ ${GKEYS_VERIFY:-yes} == no ]] && return 0
	gkeys_verify_lookup || return 0
	local cat=${GKEYS_MATCH_SCOPE%%/*} nick= f ext sig output status reason checked=0
	[[ ${GKEYS_MATCH_SCOPE} == */* ]] && nick=${GKEYS_MATCH_SCOPE#*/}
	[[ -n ${cat} ]] || die "gkeys: $(gkeys_verify_conf_path): no CATEGORY[/NICK] for ${CATEGORY}/${PN}"
	local -a cmd
	read -r -a cmd <<<"${GKEYS_VERIFY_COMMAND:-gkeys}"
	[[ -n ${GKEYS_VERIFY_CONFIG} ]] && cmd+=( -c "${GKEYS_VERIFY_CONFIG}" )
	for f in ${A}; do
		gkeys_wants_signature "${f}" || continue
		sig=
		for ext in asc sig sign; do
			[[ -f ${DISTDIR}/${f}.${ext} ]] && { sig=${DISTDIR}/${f}.${ext}; break; }
		done
		[[ -n ${sig} ]] || die "gkeys: ${f}: no signature (${f}.asc/.sig) in ${DISTDIR};" \
			"$(gkeys_verify_conf_path) requires one for ${CATEGORY}/${PN}"
		ebegin "gkeys: verifying ${f} (${GKEYS_MATCH_SCOPE})"
		output=$(GKEYS_READ_ONLY_KEYRINGS=1 "${cmd[@]}" verify -F "${DISTDIR}/${f}" -s "${sig}" -C "${cat}" ${nick:+-n "${nick}"} 2>&1)
		status=$?
		reason=${output##*$'\n'}
		eend ${status} || die "gkeys: ${f}: NOT verified: ${reason# \* }" \
			"(keys missing? as root: gkeys update-seed -C ${cat}; skip with GKEYS_VERIFY=no)"
		checked=$(( checked + 1 ))
	done
	# A listed package whose distfile globs match nothing in ${A} would otherwise pass unchecked.
	(( checked > 0 )) || die "gkeys: $(gkeys_verify_conf_path) lists ${CATEGORY}/${PN}, but no distfile of" \
		"\${A} (${A:-none}) matches '${GKEYS_MATCH_GLOBS:-every distfile}': nothing verified (fix the" \
		"DISTFILE-GLOBs, or skip with GKEYS_VERIFY=no)"
}

if ! declare -F pre_src_unpack >/dev/null; then
	pre_src_unpack() {
		gkeys_pre_src_unpack
	}
fi
