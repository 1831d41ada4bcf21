#!/usr/bin/env bash
# A real single-node Apache Kafka broker on this machine (KRaft: broker and controller in one
# JVM), from Kafka's own artifacts on Maven Central (deploy/kafka/pom.xml). No Docker.
#
#   deploy/kafka/broker.sh resolve         resolve and cache the broker's jars (the setup runs it)
#   deploy/kafka/broker.sh start [DIR]     format DIR's storage if new, start; prints the
#                                          bootstrap servers (host:port)
#   deploy/kafka/broker.sh stop [DIR]      stop it (SIGTERM: a controlled shutdown); the data stays
#   deploy/kafka/broker.sh status [DIR]
#
# DIR defaults to .kafka/ in this repository. Settings: KAFKA_PORT (default 9092),
# KAFKA_CONTROLLER_PORT (default KAFKA_PORT + 1), KAFKA_HEAP (default 512m). A start after a
# stop keeps the topics and their records: the same storage, the same ports.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/medallion/kafka"
classpath="$cache/classpath.txt"
pom="$repo/deploy/kafka/pom.xml"

resolve() {
  if [[ -s "$classpath" && "$classpath" -nt "$pom" ]] \
      && tr ':' '\n' < "$classpath" | while read -r jar; do [[ -f "$jar" ]] || exit 1; done; then
    return 0
  fi
  command -v mvn > /dev/null || { echo "expected Maven (mvn) on PATH to resolve the broker's jars, found none" >&2; exit 1; }
  mkdir -p "$cache"
  mvn -q -B -Dstyle.color=never -f "$pom" dependency:build-classpath -Dmdep.outputFile="$classpath.tmp" >&2
  mv "$classpath.tmp" "$classpath"
  echo "Kafka broker jars ready: $(tr ':' '\n' < "$classpath" | wc -l) jars ($classpath)" >&2
}

running() { [[ -f "$1/pid" ]] && kill -0 "$(cat "$1/pid")" 2> /dev/null; }

listening() { (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }

start() {
  local dir="$1" port="${KAFKA_PORT:-9092}"
  local controller="${KAFKA_CONTROLLER_PORT:-$((port + 1))}"
  resolve
  if running "$dir"; then
    echo "already running (pid $(cat "$dir/pid"))" >&2
    echo "127.0.0.1:$(cat "$dir/port")"
    return 0
  fi
  mkdir -p "$dir/data"
  cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
delete.topic.enable=true
PROPS
  local cp
  cp="$(cat "$classpath")"
  if [[ ! -f "$dir/data/meta.properties" ]]; then
    java -cp "$cp" kafka.tools.StorageTool format -c "$dir/server.properties" \
      -t "$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2> /dev/null)" > "$dir/format.log" 2>&1 \
      || { echo "expected the broker's storage formatted, it was not:" >&2; cat "$dir/format.log" >&2; exit 1; }
  fi
  (exec setsid java "-Xmx${KAFKA_HEAP:-512m}" -cp "$cp" kafka.Kafka "$dir/server.properties" \
    >> "$dir/broker.log" 2>&1 < /dev/null) &
  echo $! > "$dir/pid"
  echo "$port" > "$dir/port"
  for _ in $(seq 1 120); do
    listening "$port" && break
    if ! running "$dir"; then
      echo "the broker stopped while starting; the end of $dir/broker.log:" >&2
      tail -20 "$dir/broker.log" >&2
      exit 1
    fi
    sleep 0.5
  done
  listening "$port" || { echo "expected the broker listening on port $port within 60 s, it was not (see $dir/broker.log)" >&2; stop "$dir"; exit 1; }
  echo "Kafka broker up: 127.0.0.1:$port (KRaft, data in $dir/data)" >&2
  echo "127.0.0.1:$port"
}

stop() {
  local dir="$1"
  if running "$dir"; then
    local pid
    pid="$(cat "$dir/pid")"
    kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2> /dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2> /dev/null || true
  fi
  rm -f "$dir/pid"
}

command="${1:-}"
if [[ "$command" == resolve ]]; then
  resolve
  exit 0
fi
dir="$(mkdir -p "${2:-$repo/.kafka}" && cd "${2:-$repo/.kafka}" && pwd)"
case "$command" in
  start) start "$dir" ;;
  stop) stop "$dir" ;;
  status) if running "$dir"; then echo "running: 127.0.0.1:$(cat "$dir/port")"; else echo "stopped"; exit 1; fi ;;
  *) echo "usage: $0 resolve | start [DIR] | stop [DIR] | status [DIR]" >&2; exit 2 ;;
esac
