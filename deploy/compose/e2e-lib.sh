# Shared by e2e.sh and e2e-variants.sh (sourced, not run, from the
# repository's root): each defines fail, log, work, and dc (the compose command of the
# stack it acts on), before it calls these.

# e2e_setup sets what both scripts run with: COMPOSE (docker-compose, else
# "docker compose") as compose_cmd, MAKE, the host ports from
# E2E_PORT_BASE (base), the API token, one tag for both images, and the
# API's and the demo target's URLs.
e2e_setup() {
	if [[ -z ${COMPOSE:-} ]]; then
		if command -v docker-compose >/dev/null; then COMPOSE=docker-compose; else COMPOSE="docker compose"; fi
	fi
	MAKE=${MAKE:-make}
	read -r -a compose_cmd <<<"$COMPOSE"
	base=${E2E_PORT_BASE:-18000}
	export FLYBALL_API_PORT=$((base + 80)) FLYBALL_TARGET_PORT=$base
	export FLYBALL_NATS_PORT=$((base + 22)) FLYBALL_NATS_MONITOR_PORT=$((base + 82))
	export FLYBALL_API_TOKEN=${FLYBALL_API_TOKEN:-flyball-e2e-token-0123456789}
	# One tag for both images, as the Makefile's IMAGE_TAG: make builds
	# NATS_IMAGE, and compose runs FLYBALL_NATS_IMAGE.
	export FLYBALL_IMAGE=${FLYBALL_IMAGE:-flyball:${IMAGE_TAG:-dev}} FLYBALL_NATS_IMAGE=${FLYBALL_NATS_IMAGE:-${NATS_IMAGE:-flyball-nats:${IMAGE_TAG:-dev}}}
	export NATS_IMAGE=$FLYBALL_NATS_IMAGE
	api_url=http://127.0.0.1:$FLYBALL_API_PORT
	target_url=http://127.0.0.1:$FLYBALL_TARGET_PORT
}

# cli runs the flyball CLI in the stack's cli service (as the cli user).
cli() { "${dc[@]}" run --rm -T cli "$@" 2> >(grep -v -E '^(Creating|Starting) .*_run' >&2); }

# api PATH [curl args...]: the HTTP API with the token.
api() {
	local path=$1
	shift
	curl -fsS --max-time 15 -H "Authorization: Bearer $FLYBALL_API_TOKEN" -H 'Content-Type: application/json' "$@" "$api_url$path"
}

# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND every second until
# it succeeds, or fail naming DESCRIPTION.
wait_for() {
	local timeout=$1 what=$2
	shift 2
	local deadline=$((SECONDS + timeout))
	until "$@"; do
		((SECONDS < deadline)) || fail "timed out after ${timeout}s waiting for: $what"
		sleep 1
	done
}

# no_violations: least privilege must not have cost anything: no NATS
# permission violation in the stack's logs (uses work and log too). Call it
# before each teardown or make down, which remove the containers and their
# logs.
# nats-server logs "Publish Violation" / "Subscription Violation" /
# "Authorization Violation"; clients see "Permissions Violation".
no_violations() {
	# To a file first: piped into grep, a failed logs command read as
	# "no violations".
	"${dc[@]}" logs --no-color >"$work/all.log" 2>&1 || fail "docker-compose logs failed: $(tail -n 3 "$work/all.log")"
	grep -E 'Violation' "$work/all.log" >"$work/violations.log" || true
	if [[ -s $work/violations.log ]]; then
		fail "NATS permission violations (a service needs a permission docs/security.md does not grant): $(sort -u "$work/violations.log" | head -n 20)"
	fi
	log "no NATS permission violations"
}
