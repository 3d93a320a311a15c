#!/usr/bin/env bash
# A private PostgreSQL cluster for a one-machine trtfarm farm (the Prefect server's database), on 127.0.0.1 only.
#
#   infra/local-farm/postgres.sh start DIR [--port N] [--db NAME]   create (first time) and start; prints the URL
#   infra/local-farm/postgres.sh createdb DIR NAME                   another database in the running cluster; its URL
#   infra/local-farm/postgres.sh url DIR [NAME]                      the URL of database NAME (default: prefect)
#   infra/local-farm/postgres.sh status DIR                          exit 0 when the cluster runs (prints its PID)
#   infra/local-farm/postgres.sh stop DIR                            stop it; nothing of it is left running
#
# Then: export PREFECT_API_DATABASE_CONNECTION_URL="$(infra/local-farm/postgres.sh url DIR)" and start the server.
# The URL is postgresql+asyncpg://trtfarm:PASSWORD@127.0.0.1:PORT/NAME (the driver Prefect's server uses).
#
# Debian's `postgresql` is installed when missing (apt-get; root). As root the cluster runs as the `postgres` user
# (PostgreSQL refuses to run as root), so DIR and its parents must be searchable by that user: /tmp/..., /var/tmp/...
# Each DIR is its own cluster with its own port (a free one, unless --port) and no unix socket, so several clusters
# (tests next to a benchmark) never collide. The data stays in DIR/data across stop/start (same password, same port
# when it is still free); delete DIR to drop it.
set -euo pipefail

PG_USER=${TRTFARM_PG_USER:-postgres}   # the unix user that runs the cluster when this script runs as root
ROLE=trtfarm                             # the database superuser inside the cluster

die() { echo "postgres.sh: $*" >&2; exit 1; }
say() { echo "postgres.sh: $*" >&2; }

bindir() {  # the newest installed server's binaries, or nothing
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && echo "$d"
    return 0
}

ensure_installed() {
    [ -n "$(bindir)" ] && return 0
    [ "$(id -u)" = 0 ] || die "PostgreSQL is not installed; as root: apt-get install postgresql"
    # one install at a time (several clusters may start at once on a fresh machine)
    exec 9>/tmp/trtfarm-postgres-install.lock
    flock 9
    if [ -z "$(bindir)" ]; then
        local policy=""
        if [ ! -e /usr/sbin/policy-rc.d ]; then  # the package must not start its own cluster (we leave nothing running)
            printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && policy=1
        fi
        say "installing Debian's postgresql (apt-get)"
        local rc=0
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -o DPkg::Lock::Timeout=300 postgresql; } >&2 || rc=$?
        [ -n "$policy" ] && rm -f /usr/sbin/policy-rc.d
        [ "$rc" = 0 ] || die "apt-get install postgresql failed (exit $rc)"
        [ -n "$(bindir)" ] || die "postgresql installed but no /usr/lib/postgresql/*/bin/initdb"
    fi
    exec 9>&-  # the server started below must not inherit the lock
}

as_pg() {  # run a server binary as the cluster's user
    if [ "$(id -u)" = 0 ]; then runuser -u "$PG_USER" -- "$@"; else "$@"; fi
}

listening() {  # is a TCP port in LISTEN state on this machine (any address)?
    local hex
    hex=$(printf '%04X' "$1")
    awk -v h=":$hex" '$4 == "0A" && toupper(substr($2, length($2) - 4)) == h { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

pick_port() {  # a free port below Linux's ephemeral range (32768+), so clients' ports do not take it
    local p i
    for i in $(seq 50); do
        p=$(shuf -i 20000-32000 -n 1)
        listening "$p" || { echo "$p"; return 0; }
    done
    die "no free port found"
}

running_pid() {  # the postmaster's PID when it runs, else nothing
    local pidfile=$DIR/data/postmaster.pid pid
    [ -s "$pidfile" ] || return 0
    pid=$(head -n 1 "$pidfile")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -qa postgres "/proc/$pid/cmdline" && echo "$pid"
    return 0
}

url() {
    local db=${1:-prefect}
    [ -s "$DIR/password" ] && [ -s "$DIR/port" ] || die "$DIR holds no cluster (run: $0 start $DIR)"
    echo "postgresql+asyncpg://$ROLE:$(cat "$DIR/password")@127.0.0.1:$(cat "$DIR/port")/$db"
}

createdb() {
    local db=$1 bin
    [[ $db =~ ^[a-z_][a-z0-9_]{0,62}$ ]] || die "database name '$db': lowercase letters, digits and _ only"
    [ -n "$(running_pid)" ] || die "the cluster in $DIR is not running (run: $0 start $DIR)"
    bin=$(bindir)
    export PGPASSWORD PGHOST=127.0.0.1 PGPORT PGUSER=$ROLE
    PGPASSWORD=$(cat "$DIR/password") PGPORT=$(cat "$DIR/port")
    if [ -z "$("$bin/psql" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'")" ]; then
        "$bin/createdb" "$db"
    fi
    url "$db"
}

init_cluster() {
    local bin=$1
    say "creating a cluster in $DIR/data"
    head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DIR/password"
    chmod 600 "$DIR/password"
    install -m 600 "$DIR/password" "$DIR/pwfile"
    [ "$(id -u)" = 0 ] && chown "$PG_USER" "$DIR/pwfile"
    as_pg "$bin/initdb" -D "$DIR/data" -U "$ROLE" --pwfile="$DIR/pwfile" --auth=scram-sha-256 -E UTF8 \
        --locale=C >"$DIR/initdb.log" 2>&1 || { rm -f "$DIR/pwfile"; cat "$DIR/initdb.log" >&2; die "initdb failed"; }
    rm -f "$DIR/pwfile"
    # TCP on 127.0.0.1 only, no unix socket (no shared /var/run/postgresql, no socket-path length limit); enough
    # connections for a few Prefect servers (each pools ~15); a commit need not wait for the disk (a crash can lose
    # the last moments, never corrupt).
    cat >>"$DIR/data/postgresql.conf" <<'EOF'

# trtfarm local farm (infra/local-farm/postgres.sh)
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 300
shared_buffers = 128MB
synchronous_commit = off
EOF
}

start() {
    local port="" given="" db=prefect bin tries pid
    while [ $# -gt 0 ]; do
        case $1 in
            --port) port=${2:?--port needs a number}; given=1; shift 2 ;;
            --db) db=${2:?--db needs a name}; shift 2 ;;
            *) die "start: unknown option $1" ;;
        esac
    done
    ensure_installed
    bin=$(bindir)
    mkdir -p "$DIR"
    if [ "$(id -u)" = 0 ]; then
        id "$PG_USER" >/dev/null 2>&1 || die "no user $PG_USER to run the cluster (PostgreSQL refuses root)"
        chown "$PG_USER" "$DIR" && chmod 700 "$DIR"
        runuser -u "$PG_USER" -- test -w "$DIR" -a -x "$DIR" ||
            die "user $PG_USER cannot reach $DIR (a parent folder is not searchable by it): use a folder under /tmp or /var/tmp"
    fi
    if [ -n "$(running_pid)" ]; then
        say "already running (PID $(running_pid))"
        createdb "$db"
        return 0
    fi
    [ -s "$DIR/data/PG_VERSION" ] || init_cluster "$bin"
    # a restart keeps its port when that port is still free (URLs handed out before stay valid)
    if [ -z "$port" ] && [ -s "$DIR/port" ] && ! listening "$(cat "$DIR/port")"; then port=$(cat "$DIR/port"); fi
    for tries in 1 2 3 4 5; do
        [ -n "$port" ] || port=$(pick_port)
        echo "$port" >"$DIR/port"
        if as_pg "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/postgres.log" -o "-p $port" -w -t 60 -s start >&2; then
            createdb "$db"
            return 0
        fi
        pid=$(running_pid)
        [ -n "$pid" ] && { stop; die "the server did not answer within 60 s; see $DIR/postgres.log"; }
        # another process took the port between the check and the bind: try another one (unless it was given)
        if [ -n "$given" ] || ! tail -n 20 "$DIR/postgres.log" | grep -q "could not bind\|could not create any TCP/IP"; then
            tail -n 20 "$DIR/postgres.log" >&2
            die "the server did not start; see $DIR/postgres.log"
        fi
        say "port $port was taken; trying another (attempt $tries)"
        port=""
    done
    die "the server did not start after 5 ports"
}

alive() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

stop() {
    local pid bin i children
    pid=$(running_pid)
    [ -n "$pid" ] || { say "not running"; return 0; }
    bin=$(bindir)
    children=$(cat "/proc/$pid/task/$pid/children" 2>/dev/null || true)
    as_pg "$bin/pg_ctl" -D "$DIR/data" -m fast -w -t 30 -s stop >&2 || {
        say "fast stop failed; killing $pid"
        kill -QUIT "$pid" 2>/dev/null || true
        sleep 2
        kill -KILL "$pid" 2>/dev/null || true
    }
    # wait until neither the postmaster nor any of its processes is left
    for i in $(seq 100); do
        alive "$pid" $children || break
        sleep 0.1
    done
    # shellcheck disable=SC2086
    alive "$pid" $children && die "processes of the cluster are still running: $pid $children"
    say "stopped"
}

CMD=${1:-}
[ $# -ge 2 ] || die "usage: $0 start|stop|url|createdb|status DIR [...] (see the header of this script)"
DIR=$2
shift 2
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
DIR=${DIR%/}
case $CMD in
    start) start "$@" ;;
    stop) stop ;;
    url) url "${1:-prefect}" ;;
    createdb) createdb "${1:?createdb needs a database name}" ;;
    status) pid=$(running_pid); [ -n "$pid" ] && echo "$pid" || { say "not running"; exit 3; } ;;
    *) die "unknown command '$CMD': start|stop|url|createdb|status" ;;
esac
