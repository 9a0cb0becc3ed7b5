#!/bin/sh
# up.sh - from a clean clone to a serving compose deployment: build, images, token files, `docker-compose up -d`, wait until healthy.
#
#   sh deploy/compose/up.sh
#
# Steps, each saying what failed and how to fix it:
#   1. checks: root (debootstrap, token file owners), docker-compose, the
#      Docker Engine at $DOCKER_HOST (default unix:///var/run/docker.sock).
#   2. `make all` (the binaries the images carry).
#   3. images, nothing pulled: sbx-broker:$SBX_TAG and sbx-api:$SBX_TAG
#      (deploy/image/daemons.sh; 1–4 minutes the first time, depending on the mirror and the machine,
#      then a few seconds),
#      and the sandbox image sbx-default:bookworm (deploy/image/build.sh;
#      skipped when present) unless SBX_SANDBOX_IMAGE names one the engine
#      already has.
#   4. the broker token, once: 32 random bytes in $SBX_SECRETS_DIR/broker.token
#      (root, 0600, read by the broker) and the same token in
#      api-broker.token (uid 10001, 0600, read by the api). Never printed.
#   5. writes the settings below to deploy/compose/.env (SBX_COMPOSE_ENV_FILE
#      overrides), so that plain `docker-compose ...` in deploy/compose
#      sees the same project and settings later; runs docker-compose up -d
#      (the broker first, the api once the broker's health check passes);
#      waits until both containers report healthy; prints what to do next.
# Running it again keeps the settings of the earlier runs: the env file it
# wrote is read first, as defaults (a variable set in the environment wins;
# set it empty, e.g. SBX_COMPOSE_OVERRIDE=, to drop a setting), and lines of
# that file up.sh does not know (your own) are kept as they are. It rebuilds
# the daemon images only when their content changed (a label holds the
# sha256 of the inputs), so docker-compose recreates only the containers
# whose image or settings changed; state (volumes, sandboxes, token) stays.
#
# Environment (all optional):
#   DOCKER_HOST          unix://PATH of the Docker Engine (the broker gets
#                        this socket mounted)
#   SBX_API_PORT         published port on 127.0.0.1 (8080)
#   SBX_SANDBOX_IMAGE    sandbox image already in the engine (default: build
#                        and use sbx-default:bookworm)
#   SBX_COMPOSE_PROJECT  compose project name (sbx)
#   SBX_SECRETS_DIR      where the token files live (deploy/compose/secrets)
#   SBX_CACHE_DIR        root filesystems kept between builds (build/images)
#   SBX_TAG              daemon image tag (local)
#   SBX_NAME_PREFIX      prefix of the sandboxes' containers/volumes (sbx-)
#   SBX_COMPOSE_ENV_FILE the env file written in step 5 (deploy/compose/.env)
#   SBX_COMPOSE_OVERRIDE a compose file merged over docker-compose.yml (your
#                        own changes: resource limits, another log driver);
#                        kept as COMPOSE_FILE in the env file
# Exit status: 0 when both services are healthy, 1 when a step failed.

set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

say() { printf '==> %s\n' "$*"; }
die() { printf 'up.sh: FAILED: %s\nup.sh: fix: %s\n' "$1" "$2" >&2; exit 1; }

# The settings of the earlier runs (step 5 writes them): defaults for this
# one. KEY=VALUE lines only, read as text (never run as shell); a variable
# set in the environment, even empty, wins. Other lines are kept in KEEP.
case ${SBX_COMPOSE_ENV_FILE:-/} in /*) ;; *) SBX_COMPOSE_ENV_FILE=$(pwd)/$SBX_COMPOSE_ENV_FILE ;; esac
ENVF=${SBX_COMPOSE_ENV_FILE:-$HERE/.env}
KEEP=
nl='
'
default() { # default VAR VALUE: VAR=VALUE unless VAR is set
	eval "[ -n \"\${$1+set}\" ]" || eval "$1=\$2"
}
if [ -f "$ENVF" ]; then
	while IFS= read -r line || [ -n "$line" ]; do
		key=${line%%=*}
		val=${line#*=}
		case $line in
		"# Written by deploy/compose/up.sh"* | "# docker-compose run in "*) continue ;;
		COMPOSE_PROJECT_NAME=*) default SBX_COMPOSE_PROJECT "$val" ;;
		SBX_TAG=* | SBX_API_PORT=* | SBX_SANDBOX_IMAGE=* | SBX_NAME_PREFIX=* | SBX_SECRETS_DIR=*)
			default "$key" "$val" ;;
		SBX_RUNTIME_SOCKET=*) default DOCKER_HOST "unix://$val" ;;
		COMPOSE_FILE=*)
			# docker-compose.yml, then the override (if any)
			case $val in *:*) default SBX_COMPOSE_OVERRIDE "${val#*:}" ;; *) default SBX_COMPOSE_OVERRIDE "" ;; esac ;;
		*) KEEP="$KEEP$line$nl" ;;
		esac
	done <"$ENVF"
fi
export DOCKER_HOST="${DOCKER_HOST:-unix:///var/run/docker.sock}"
PROJECT=${SBX_COMPOSE_PROJECT:-sbx}
SECRETS=${SBX_SECRETS_DIR:-$HERE/secrets}
CACHE=${SBX_CACHE_DIR:-$REPO/build/images}
API_UID=10001
DOCKER=${SBX_DOCKER_CLI:-docker}

# ---------------------------------------------------------------- 1. checks

[ "$(id -u)" -eq 0 ] || die "up.sh needs root" "run it as root (debootstrap builds the images; the token files get their owners)"
command -v docker-compose >/dev/null 2>&1 || die "docker-compose is not installed" "run: sh deploy/deps.sh"
command -v "$DOCKER" >/dev/null 2>&1 || die "the docker CLI is not installed" "run: sh deploy/deps.sh"
case $DOCKER_HOST in
unix://*) ;;
*) die "DOCKER_HOST=$DOCKER_HOST is not a unix socket" "the broker needs the runtime's unix socket: set DOCKER_HOST=unix://PATH" ;;
esac
export SBX_RUNTIME_SOCKET="${DOCKER_HOST#unix://}"
"$DOCKER" version >/dev/null 2>&1 || die "no Docker Engine answers at $DOCKER_HOST" \
	"start it (systemctl start docker; without systemd: service docker start, or dockerd &) or set DOCKER_HOST=unix://PATH of one"
case $SECRETS in /*) ;; *) SECRETS=$(pwd)/$SECRETS ;; esac
case $CACHE in /*) ;; *) CACHE=$(pwd)/$CACHE ;; esac
case ${SBX_COMPOSE_OVERRIDE:-/} in /*) ;; *) SBX_COMPOSE_OVERRIDE=$(pwd)/$SBX_COMPOSE_OVERRIDE ;; esac
export SBX_SECRETS_DIR="$SECRETS"

# ---------------------------------------------------------------- 2. build

say "building the daemons (make all)"
make -s -C "$REPO" all >/dev/null || die "make all failed (the lines above say why)" "run: sh deploy/deps.sh, then make all"

# ---------------------------------------------------------------- 3. images

say "images sbx-broker and sbx-api from this tree"
sh "$REPO/deploy/image/daemons.sh" "$DOCKER_HOST" "$CACHE" "${SBX_TAG:-local}" ||
	die "building the daemon images failed (the line above says why)" "fix that and run up.sh again"
if [ -n "${SBX_SANDBOX_IMAGE:-}" ] && [ "$SBX_SANDBOX_IMAGE" != sbx-default:bookworm ]; then
	"$DOCKER" image inspect "$SBX_SANDBOX_IMAGE" >/dev/null 2>&1 ||
		die "SBX_SANDBOX_IMAGE=$SBX_SANDBOX_IMAGE is not in the engine at $DOCKER_HOST" \
		    "import it first (docker import / docker load), or unset it to build sbx-default:bookworm"
	say "sandbox image $SBX_SANDBOX_IMAGE (from SBX_SANDBOX_IMAGE)"
else
	export SBX_SANDBOX_IMAGE=sbx-default:bookworm
	say "sandbox image $SBX_SANDBOX_IMAGE"
	sh "$REPO/deploy/image/build.sh" docker "$DOCKER_HOST" "$CACHE" "$SBX_SANDBOX_IMAGE" ||
		die "building the sandbox image failed (the line above says why)" \
		    "fix that, or set SBX_SANDBOX_IMAGE to an image the engine has"
fi

# ---------------------------------------------------------------- 4. token

umask 077
mkdir -p "$SECRETS"
chmod 0700 "$SECRETS"
if [ ! -s "$SECRETS/broker.token" ]; then
	# 32 random bytes, base64 without /+= (what sbx_token_generate makes).
	head -c 32 /dev/urandom | base64 | tr -d '/+=\n' >"$SECRETS/broker.token.tmp"
	mv "$SECRETS/broker.token.tmp" "$SECRETS/broker.token"
	say "broker token generated in $SECRETS (not shown)"
fi
chown 0:0 "$SECRETS/broker.token"
chmod 0600 "$SECRETS/broker.token"
# The api runs as uid 10001 without capabilities: it reads its own copy.
# Replaced only when the token changed: the running api's bind mount keeps
# the file it was given.
if ! cmp -s "$SECRETS/broker.token" "$SECRETS/api-broker.token"; then
	cp "$SECRETS/broker.token" "$SECRETS/api-broker.token.tmp"
	mv "$SECRETS/api-broker.token.tmp" "$SECRETS/api-broker.token"
fi
chown "$API_UID:$API_UID" "$SECRETS/api-broker.token"
chmod 0600 "$SECRETS/api-broker.token"
# The compose file's secrets are bind mounts: the directory must be
# reachable by the daemon, the files stay 0600 to their owners.
chmod 0711 "$SECRETS"
umask 022

# ---------------------------------------------------------------- 5. up

cat >"$ENVF.tmp" <<EOF
# Written by deploy/compose/up.sh: the settings of this deployment, read by
# docker-compose run in $HERE (or with --env-file).
COMPOSE_PROJECT_NAME=$PROJECT
SBX_TAG=${SBX_TAG:-local}
SBX_API_PORT=${SBX_API_PORT:-8080}
SBX_RUNTIME_SOCKET=$SBX_RUNTIME_SOCKET
SBX_SANDBOX_IMAGE=$SBX_SANDBOX_IMAGE
SBX_NAME_PREFIX=${SBX_NAME_PREFIX:-sbx-}
SBX_SECRETS_DIR=$SECRETS
COMPOSE_FILE=$HERE/docker-compose.yml${SBX_COMPOSE_OVERRIDE:+:$SBX_COMPOSE_OVERRIDE}
EOF
printf '%s' "$KEEP" >>"$ENVF.tmp"
mv "$ENVF.tmp" "$ENVF"

compose() {
	docker-compose --env-file "$ENVF" -p "$PROJECT" -f "$HERE/docker-compose.yml" \
		${SBX_COMPOSE_OVERRIDE:+-f "$SBX_COMPOSE_OVERRIDE"} "$@"
}
say "docker-compose -p $PROJECT up -d (api on 127.0.0.1:${SBX_API_PORT:-8080})"
compose up -d || die "docker-compose up failed (the lines above say why)" \
	"see: docker-compose -p $PROJECT -f $HERE/docker-compose.yml logs"
# Daemon images an earlier run replaced while a container still used them
# are dangling now that the containers run the new ones: remove them.
for t in sbx-broker sbx-api; do
	"$DOCKER" image prune -f --filter "label=org.opencontainers.image.title=$t" >/dev/null 2>&1 || true
done

health() {
	id=$(compose ps -q "$1" 2>/dev/null)
	[ -n "$id" ] || { echo missing; return; }
	"$DOCKER" inspect -f '{{.State.Health.Status}}' "$id" 2>/dev/null || echo missing
}
i=0
while :; do
	b=$(health broker)
	a=$(health api)
	[ "$b" = healthy ] && [ "$a" = healthy ] && break
	i=$((i + 1))
	if [ "$i" -gt 120 ]; then
		compose logs --tail 20 >&2 || true
		die "not healthy after 120 s (broker: $b, api: $a)" \
		    "see the logs above; docker inspect the container's .State.Health for the check's output"
	fi
	sleep 1
done

cat <<EOF

==> sbx is serving: http://127.0.0.1:${SBX_API_PORT:-8080} (broker and api healthy, project $PROJECT)

Add an operator and a player (each key is printed once; keep it):
    cd $HERE; umask 077
    docker-compose exec -T api sandbox-api admin create-operator alice > alice.key
    docker-compose exec -T api sandbox-api admin create-player bob > bob.key
Then, as bob (see docs/deploy.md and docs/api.md):
    curl -H "Authorization: Bearer \$(cat bob.key)" -d '{"name":"npc1"}' http://127.0.0.1:${SBX_API_PORT:-8080}/api/v1/npcs
EOF
