#!/usr/bin/env bash
# check-passwords.sh [ENV_FILE]: make up runs it before anything else. It
# refuses a FLYBALL_NATS_<USER>_PASSWORD that nats-server would not read
# back as the same string, naming the variable (never the value).
#
# nats/accounts.conf refers to each password as $FLYBALL_NATS_…_PASSWORD,
# and nats-server parses the variable's value as config syntax, not as a
# string: 12345678 and 2GB become numbers, true, yes or off booleans,
# 2006-01-02T15:04:05Z a date, and a space , ; } ] ' or \ a parse error.
# The node then fails to start with an error that names neither the
# variable nor the password (accounts.conf:L:C: interface conversion:
# interface {} is int64, not string), restarts in a loop, and make up
# times out. Allowed: a letter first, then letters, digits and
# _ . ~ + / = @ % ^ * ! - (and not true, false, yes, no, on or off).
# TestComposePasswordsParseAsGiven runs nats-server's parser on
# accounts.conf with values this script allows and refuses.
#
# A variable set (non-empty) in the environment wins over ENV_FILE
# (deploy/compose/.env), as in docker-compose; an unset or empty one gets
# the compose file's dev default.
set -euo pipefail

env_file=${1:-}
users=(SYS ADMIN PROVISIONER GOVERNOR TIMER EXECUTOR BREAKER DEADLETTER SWEEPER API CLI)
allowed='^[A-Za-z][A-Za-z0-9_.~+/=@%^*!-]*$'
boolean='^(true|false|yes|no|on|off)$'

declare -A from_file=()
if [[ -n $env_file && -f $env_file ]]; then
	line_re='^[[:space:]]*(export[[:space:]]+)?(FLYBALL_NATS_[A-Z]+_PASSWORD)[[:space:]]*=(.*)$'
	while IFS= read -r line || [[ -n $line ]]; do
		[[ $line =~ $line_re ]] || continue
		name=${BASH_REMATCH[2]} v=${BASH_REMATCH[3]}
		if [[ $v =~ ^\"(.*)\"$ || $v =~ ^\'(.*)\'$ ]]; then v=${BASH_REMATCH[1]}; fi
		from_file[$name]=$v
	done <"$env_file"
fi

bad=0
for u in "${users[@]}"; do
	var=FLYBALL_NATS_${u}_PASSWORD
	v=${!var:-} where="the environment"
	if [[ -z $v ]]; then v=${from_file[$var]:-} where=$env_file; fi
	[[ -n $v ]] || continue
	if [[ ! $v =~ $allowed ]] || [[ ${v,,} =~ $boolean ]]; then
		echo "make up: $var (from $where) is not a password nats-server reads as given:" \
			"use a letter first, then letters, digits and _ . ~ + / = @ % ^ * ! -" \
			"(not true, false, yes, no, on or off); for example p\$(openssl rand -hex 24) (docs/security.md)" >&2
		bad=1
	fi
done
exit "$bad"
