#!/usr/bin/env bash
# Wait until every container of a compose project is running and, where it
# has a healthcheck, healthy. Used by `make up` and the e2e test.
#
#   wait-healthy.sh TIMEOUT_SECONDS COMPOSE_COMMAND...
#   wait-healthy.sh 180 docker-compose -p flyball -f deploy/compose/docker-compose.yml
#
# A one-shot container (label io.flyball.one-shot=true: provision) is done
# once it has exited 0, and dead if it exited with anything else.
#
# Exits 0 when all are healthy; 1 on timeout, when a container exited or
# restarted WAIT_MAX_RESTARTS (3) times, after printing the culprits, their
# last health probes and their logs.
set -euo pipefail

timeout=${1:?usage: wait-healthy.sh TIMEOUT COMPOSE_COMMAND...}
shift
compose=("$@")
((${#compose[@]})) || { echo "wait-healthy.sh: no compose command given" >&2; exit 2; }

max_restarts=${WAIT_MAX_RESTARTS:-3}
deadline=$((SECONDS + timeout))
start=$SECONDS
last=""
while :; do
	mapfile -t ids < <("${compose[@]}" ps -q 2>/dev/null | sed '/^$/d')
	if ((${#ids[@]} == 0)); then
		echo "wait-healthy: no containers in the project (did 'up' run?)" >&2
		exit 1
	fi
	# name status health(or "none") restart-count exit-code one-shot(or "no")
	mapfile -t rows < <(docker inspect --format \
		'{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{.RestartCount}} {{.State.ExitCode}} {{or (index .Config.Labels "io.flyball.one-shot") "no"}}' \
		"${ids[@]}" | sed 's#^/##' | sort)
	bad=()
	dead=()
	for row in "${rows[@]}"; do
		read -r name status health restarts code oneshot <<<"$row"
		if [[ $oneshot == true ]]; then
			case "$status/$code" in
			exited/0) continue ;; # done
			created/* | running/*) bad+=("$row"); continue ;; # not yet
			esac
		fi
		case "$status/$health" in
		running/healthy | running/none) ;;
		exited/* | dead/*) dead+=("$row") ; bad+=("$row") ;;
		*)
			bad+=("$row")
			# A crash loop does not heal by waiting: report it now.
			if ((restarts >= max_restarts)); then dead+=("$row"); fi
			;;
		esac
	done
	if ((${#bad[@]} == 0)); then
		echo "wait-healthy: all ${#rows[@]} containers healthy after $((SECONDS - start))s"
		exit 0
	fi
	summary="${#bad[@]}/${#rows[@]} not ready: $(printf '%s ' "${bad[@]%% *}")"
	if [[ $summary != "$last" ]]; then
		echo "wait-healthy: $summary($((SECONDS - start))s)"
		last=$summary
	fi
	if ((${#dead[@]})) || ((SECONDS >= deadline)); then
		if ((${#dead[@]})); then
			echo "wait-healthy: containers exited or keep crashing (status, health, restarts):" >&2
		else
			echo "wait-healthy: timed out after ${timeout}s; not ready:" >&2
		fi
		for row in "${bad[@]}"; do
			name=${row%% *}
			echo "---- $row" >&2
			docker inspect --format '{{if .State.Health}}{{range .State.Health.Log}}probe exit {{.ExitCode}}: {{.Output}}{{end}}{{end}}' "$name" 2>/dev/null | tail -n 3 >&2 || true
			docker logs --tail 30 "$name" 2>&1 | sed 's/^/    /' >&2 || true
		done
		exit 1
	fi
	sleep 1
done
