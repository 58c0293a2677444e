#!/usr/bin/env bash
# Short real bring-ups of the compose files e2e.sh does not run, as the
# docs tell operators to use them (make e2e runs it after e2e.sh). Budget:
# about 2 minutes on a 2-core machine.
#
#   1. docker-compose.single.yml: make up, a task created with the CLI on
#      the compose network, a run seen at the demo target, make down
#   2. docker-compose.yml + docker-compose.tls.yml (certificates from
#      tls/gen-certs.sh): make up, a task created through the HTTP API, runs
#      seen at the target and listed by the CLI over TLS from the host;
#      then a full restart with the data kept (make down KEEP_VOLUMES=1,
#      make up): the task is still there, its runs resume, and no slot is
#      called twice; make down
# Without openssl, step 2 runs without the TLS file and says so.
#
# Needs what e2e.sh needs (docker, docker-compose, curl, jq) and bin/flyball
# (make up builds it).
#
# Environment:
#   COMPOSE, MAKE      as in e2e.sh
#   E2E_PROJECT        compose project name prefix (default: flyball-e2e);
#                      the projects are <prefix>-single and <prefix>-restart
#   E2E_PORT_BASE      host ports as in e2e.sh (default 18000)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# e2e_setup, wait_for, cli, api
# shellcheck source=deploy/compose/e2e-lib.sh
source deploy/compose/e2e-lib.sh

if ! docker info >/dev/null 2>&1; then
	echo "SKIPPED: no docker daemon (docker info failed); the compose variants test did not run"
	exit 0
fi
e2e_setup
prefix=${E2E_PROJECT:-flyball-e2e}

work=$(mktemp -d)
start=$SECONDS
passed=false
project=""
files=()
dc=()
timings=()

log() { printf '%s [e2e-variants %4ds] %s\n' "$(date -u +%H:%M:%S)" "$((SECONDS - start))" "$*"; }
fail() {
	log "FAIL ($project): $*"
	exit 1
}
# use PROJECT FILE...: the stack the next commands act on.
use() {
	project=$1
	shift
	files=("$@")
	dc=("${compose_cmd[@]}" -p "$project")
	for f in "${files[@]}"; do dc+=(-f "deploy/compose/$f"); done
}
teardown() { "${dc[@]}" --profile tools down --remove-orphans -v >/dev/null 2>&1 || true; }
cleanup() {
	local rc=$?
	set +e
	if [[ $passed != true && ${#dc[@]} -gt 0 ]]; then
		echo "==================== e2e-variants FAILED ($project): docker-compose logs ===================="
		"${dc[@]}" logs --no-color --timestamps 2>&1 | tail -n 1500
	fi
	((${#dc[@]})) && teardown
	rm -rf "$work"
	if [[ $passed != true ]]; then exit "$((rc == 0 ? 1 : rc))"; fi
}
trap cleanup EXIT

make_up() { "$MAKE" --no-print-directory up COMPOSE_PROJECT="$project" COMPOSE="$COMPOSE" COMPOSE_FILES="${files[*]}" >"$1" 2>&1 || { cat "$1"; fail "make up failed"; }; }
calls() { curl -fsS --max-time 5 "$target_url/requests?task=$1" | jq length; }
task_json() {
	jq -nc --arg id "$1" '{id: $id, target: {http: {method: "GET", url: ("http://target:8000/" + $id), timeout: "5s"}}, schedule: {interval: "1s"}}'
}
lap() { timings+=("$1: $((SECONDS - $2))s"); }
# ---------------------------------------------------------------------------
t0=$SECONDS
use "$prefix-single" docker-compose.single.yml
teardown
log "single node: make up COMPOSE_FILES=${files[*]}"
make_up "$work/up-single.out"
task_json e2e-single | cli task create -f - >/dev/null || fail "flyball task create -f (cli service) failed"
single_runs() { (($(calls e2e-single) >= 2)); }
wait_for 30 "2 calls of e2e-single at the target" single_runs
cli task list | grep -q '^e2e-single ' || fail "flyball task list does not list e2e-single"
log "single node: runs arrive, flyball task list lists the task"
no_violations
teardown
lap "single node" "$t0"

# ---------------------------------------------------------------------------
t0=$SECONDS
tls=true
if ! command -v openssl >/dev/null; then
	# CI installs openssl (.ci/run): a skip there would pass unseen.
	[[ ${CI:-} != true ]] || { echo "e2e-variants: openssl is required under CI=true (apt-get install openssl)" >&2; exit 1; }
	tls=false
	log "TLS SKIPPED: no openssl for tls/gen-certs.sh; the restart runs on docker-compose.yml alone"
	use "$prefix-restart" docker-compose.yml
else
	# Keep certificates an operator made, unless they expire within the hour.
	if ! openssl x509 -checkend 3600 -noout -in deploy/compose/tls/server.pem >/dev/null 2>&1; then
		deploy/compose/tls/gen-certs.sh
	fi
	use "$prefix-restart" docker-compose.yml docker-compose.tls.yml
fi
teardown
log "3 nodes: make up COMPOSE_FILES=\"${files[*]}\""
make_up "$work/up-restart.out"
host_url=nats://127.0.0.1:$FLYBALL_NATS_PORT
host_env=(NATS_USER=cli NATS_PASSWORD="${FLYBALL_NATS_CLI_PASSWORD:-dev-cli}")
if [[ $tls == true ]]; then
	# What make up printed for the host CLI.
	grep -q "NATS_URL=tls://127.0.0.1:$FLYBALL_NATS_PORT .*NATS_CA=deploy/compose/tls/ca.pem" "$work/up-restart.out" ||
		fail "make up did not print the tls:// URL and NATS_CA: $(grep NATS_URL "$work/up-restart.out")"
	host_url=tls://127.0.0.1:$FLYBALL_NATS_PORT
	host_env+=(NATS_CA=deploy/compose/tls/ca.pem)
fi
task_json e2e-restart | api /api/v1/tasks -d @- >"$work/create.json" || fail "POST /api/v1/tasks failed: $(cat "$work/create.json")"
# catchUp none: a slot missed during the restart is skipped, never run late
# (a dispatch an executor held when it stopped comes back as a redelivery).
task_json e2e-none | jq -c '.catchUp = "none"' | api /api/v1/tasks -d @- >"$work/create-none.json" ||
	fail "POST /api/v1/tasks (catchUp none) failed: $(cat "$work/create-none.json")"
restart_runs() { (($(calls e2e-restart) >= 2 && $(calls e2e-none) >= 2)); }
wait_for 30 "2 calls of e2e-restart and e2e-none at the target" restart_runs
env "${host_env[@]}" NATS_URL="$host_url" bin/flyball task list | grep -q '^e2e-restart ' ||
	fail "flyball task list from the host ($host_url) does not list e2e-restart"
log "3 nodes$([[ $tls == true ]] && echo ' over TLS'): runs arrive, the host CLI lists the task"
before=$(curl -fsS --max-time 5 "$target_url/requests?task=e2e-restart")
# make down removes the containers, and their logs with them.
no_violations
# Both executors stop together, first: each hands back the dispatch it
# holds for the next slot, and no executor is left to take it before the
# restart, after which it comes back as a redelivery long past its slot.
"${dc[@]}" stop executor1 executor2 >/dev/null 2>&1 || fail "docker-compose stop executor1 executor2 failed"
"$MAKE" --no-print-directory down KEEP_VOLUMES=1 COMPOSE_PROJECT="$project" COMPOSE="$COMPOSE" COMPOSE_FILES="${files[*]}" >/dev/null 2>&1 ||
	fail "make down KEEP_VOLUMES=1 failed"
log "full restart: make down KEEP_VOLUMES=1, make up"
make_up "$work/up-again.out"
resumed() { (($(calls e2e-restart) >= 2)); }
wait_for 60 "calls of e2e-restart after the restart" resumed
cli task list | grep -q '^e2e-restart ' || fail "after the restart flyball task list does not list e2e-restart"
dup=$(jq -n --argjson a "$before" --argjson b "$(curl -fsS --max-time 5 "$target_url/requests?task=e2e-restart")" \
	'$a + $b | group_by(.idempotencyKey) | map(select(length > 1) | .[0].idempotencyKey)')
[[ $dup == "[]" ]] || fail "slots called twice across the restart: $dup"
# Each call's lateness: its arrival minus its slot (the Idempotency-Key is
# <task>:<slot in Unix ms>). The restart took far longer than 5 s.
none_ok() { (($(calls e2e-none) >= 2)); }
wait_for 30 "calls of e2e-none after the restart" none_ok
late=$(curl -fsS --max-time 5 "$target_url/requests?task=e2e-none" |
	jq -c '[.[] | {key: .idempotencyKey, late: ((.time[0:19] + "Z" | fromdate) - ((.idempotencyKey | split(":")[1] | tonumber) / 1000 | floor))} | select(.late > 5)]')
[[ $late == "[]" ]] || fail "catchUp none: slots called late across the restart instead of skipped: $late"
log "after the restart: the tasks are listed, their runs resume, no slot called twice, no catchUp none slot called late"
no_violations
teardown
lap "3 nodes$([[ $tls == true ]] && echo ' TLS'), full restart" "$t0"

passed=true
echo
echo "e2e-variants PASSED in $((SECONDS - start))s"
printf '  %s\n' "${timings[@]}"
