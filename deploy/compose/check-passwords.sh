#!/usr/bin/env bash
# check-passwords.sh [ENV_FILE]: make up runs it before anything else. It
# checks the stack's secrets, naming variables, never values:
#
# 1. It refuses a FLYBALL_NATS_<USER>_PASSWORD that nats-server would not
#    read back as the same string.
#
#    nats/accounts.conf refers to each password as $FLYBALL_NATS_…_PASSWORD,
#    and nats-server parses the variable's value as config syntax, not as a
#    string: 12345678 and 2GB become numbers, true, yes or off booleans,
#    2006-01-02T15:04:05Z a date, and a space , ; } ] ' or \ a parse error.
#    The node then fails to start with an error that names neither the
#    variable nor the password (accounts.conf:L:C: interface conversion:
#    interface {} is int64, not string), restarts in a loop, and make up
#    times out. Allowed: a letter first, then letters, digits and
#    _ . ~ + / = @ % ^ * ! - (and not true, false, yes, no, on or off).
#    TestComposePasswordsParseAsGiven runs nats-server's parser on
#    accounts.conf with values this script allows and refuses.
#
# 2. It refuses FLYBALL_API_TOKENS without FLYBALL_API_TOKEN: the compose
#    files give the API container FLYBALL_API_TOKENS from the host's
#    FLYBALL_API_TOKEN, so an operator who set the name the binary
#    documents would get the published dev token.
#
# 3. It lists, in one warning, every secret of docker-compose.yml (each
#    ${FLYBALL_…_PASSWORD:-…} and ${FLYBALL_…_TOKEN:-…}) that is unset or
#    at its published dev default. With FLYBALL_REQUIRE_SECRETS=1 (what a
#    real deployment sets) it refuses them instead, one line each.
#    TestCheckPasswordsWarnsOfDevDefaults.
#
# A variable set in the environment wins over ENV_FILE
# (deploy/compose/.env) even when empty, as in docker-compose, and an
# unset or empty one gets the compose file's dev default (dotenv.sh): a
# deploy shell that exports FLYBALL_API_TOKEN= runs the API on the dev
# token whatever the file holds. FLYBALL_API_TOKENS and
# FLYBALL_REQUIRE_SECRETS, which compose does not read, are taken from
# ENV_FILE when empty in the environment.
set -euo pipefail

here=.
if [[ ${BASH_SOURCE[0]} == */* ]]; then here=${BASH_SOURCE[0]%/*}; fi
# shellcheck source=dotenv.sh
. "$here/dotenv.sh"
read_env_file "${1:-}"
# lookup_own NAME: lookup for a setting of this script's, not compose's.
lookup_own() {
	lookup "$1"
	if [[ -z $v ]]; then v=${from_file[$1]:-} where=$env_file; fi
}
compose_file=$here/docker-compose.yml
users=(SYS ADMIN PROVISIONER GOVERNOR TIMER EXECUTOR BREAKER DEADLETTER SWEEPER API CLI)
allowed='^[A-Za-z][A-Za-z0-9_.~+/=@%^*!-]*$'
boolean='^(true|false|yes|no|on|off)$'

bad=0
for u in "${users[@]}"; do
	var=FLYBALL_NATS_${u}_PASSWORD
	lookup "$var"
	[[ -n $v ]] || continue
	if [[ ! $v =~ $allowed ]] || [[ ${v,,} =~ $boolean ]]; then
		echo "make up: $var (from $where) is not a password nats-server reads as given:" \
			"use a letter first, then letters, digits and _ . ~ + / = @ % ^ * ! -" \
			"(not true, false, yes, no, on or off); for example p\$(openssl rand -hex 24) (docs/security.md)" >&2
		bad=1
	fi
done

lookup_own FLYBALL_API_TOKENS
if [[ -n $v ]]; then
	tokens_from=$where
	lookup FLYBALL_API_TOKEN
	if [[ -z $v ]]; then
		echo "make up: FLYBALL_API_TOKENS (from $tokens_from) is not read by the compose files, and the API would" \
			"accept the published dev token: set FLYBALL_API_TOKEN instead (its container gets it as FLYBALL_API_TOKENS; docs/security.md)" >&2
		bad=1
	fi
fi

lookup_own FLYBALL_REQUIRE_SECRETS
case ${v,,} in
1 | true | yes) require=1 ;;
'' | 0 | false | no) require=0 ;;
*)
	echo "make up: FLYBALL_REQUIRE_SECRETS (from $where): want 1 (refuse dev default secrets) or 0" >&2
	exit 1
	;;
esac

secrets=0 defaults=()
declare -A seen=()
ref_re='\$\{(FLYBALL_[A-Z0-9_]*_(PASSWORD|TOKEN)):-([^}]*)\}'
mapfile -t lines <"$compose_file"
for line in "${lines[@]}"; do
	[[ $line == *'${FLYBALL_'* && $line =~ $ref_re ]] || continue
	name=${BASH_REMATCH[1]} def=${BASH_REMATCH[3]}
	[[ -z ${seen[$name]:-} ]] || continue
	seen[$name]=1 secrets=$((secrets + 1))
	lookup "$name"
	if [[ -z $v || $v == "$def" ]]; then defaults+=("$name"); fi
done
if ((secrets == 0)); then
	echo "make up: found no \${FLYBALL_…_PASSWORD:-…} or \${FLYBALL_…_TOKEN:-…} in $compose_file to check" >&2
	exit 1
fi
if ((${#defaults[@]})); then
	if ((require)); then
		for name in "${defaults[@]}"; do
			if [[ -v $name && -z ${!name} ]]; then
				echo "make up: $name is set but empty in the environment, which wins over ${env_file:-deploy/compose/.env} in compose" \
					"and gives the published dev default, which FLYBALL_REQUIRE_SECRETS=1 refuses: set it there or unset it (docs/security.md)" >&2
			else
				echo "make up: $name is unset or at its published dev default, which FLYBALL_REQUIRE_SECRETS=1 refuses:" \
					"set it in the environment or ${env_file:-deploy/compose/.env} (docs/security.md)" >&2
			fi
		done
		bad=1
	else
		echo "make up: warning: at their published dev defaults: ${defaults[*]}." \
			"Fine on a laptop; set them before anyone else can reach the stack, and FLYBALL_REQUIRE_SECRETS=1 in a real deployment (docs/security.md)" >&2
	fi
fi
exit "$bad"
