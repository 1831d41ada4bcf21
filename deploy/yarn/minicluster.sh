#!/usr/bin/env bash
# A real single-node Hadoop cluster on this machine, to try the framework on YARN + HDFS:
# HDFS (NameNode + DataNode) and YARN (ResourceManager + NodeManager), started in one JVM
# from Hadoop's own artifacts on Maven Central (deploy/yarn/pom.xml). No Docker.
#
#   deploy/yarn/minicluster.sh resolve        resolve and cache the cluster's jars (the setup runs it)
#   deploy/yarn/minicluster.sh start [DIR]    start it; prints the line to source
#   deploy/yarn/minicluster.sh stop [DIR]     stop it (the data under DIR stays until the next start)
#   deploy/yarn/minicluster.sh status [DIR]
#
# DIR (default: .minicluster/ in this repository) receives, once the cluster is up:
#   conf/          client configuration (core-site.xml, hdfs-site.xml, yarn-site.xml):
#                  HADOOP_CONF_DIR for spark-submit and any Hadoop client
#   spark-conf/    spark-defaults.conf for this cluster (SPARK_CONF_DIR): Spark's jars and this
#                  repository's Python taken from this host, small containers
#   env.sh         exports HADOOP_CONF_DIR, SPARK_CONF_DIR, MEDALLION_HDFS_ROOT and
#                  MEDALLION_METASTORE (an embedded Derby metastore in DIR)
# A new start formats HDFS and empties the metastore.
#   cluster.log    the cluster's own log
#
# Settings: MINICLUSTER_MEMORY_MB (NodeManager memory, default 6144), MINICLUSTER_VCORES
# (default 4), MINICLUSTER_NAMENODE_PORT (default: any free port), PYTHON (the Python whose
# pyspark and packages the containers use; default: .venv/bin/python of this repository).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/medallion/minicluster"
classpath="$cache/classpath.txt"
pom="$repo/deploy/yarn/pom.xml"

resolve() {
  if [[ -s "$classpath" && "$classpath" -nt "$pom" ]] \
      && tr ':' '\n' < "$classpath" | while read -r jar; do [[ -f "$jar" ]] || exit 1; done; then
    return 0
  fi
  command -v mvn > /dev/null || { echo "expected Maven (mvn) on PATH to resolve the cluster's jars, found none" >&2; exit 1; }
  mkdir -p "$cache"
  mvn -q -B -f "$pom" dependency:build-classpath -Dmdep.outputFile="$classpath.tmp" >&2
  mv "$classpath.tmp" "$classpath"
  echo "mini cluster jars ready: $(tr ':' '\n' < "$classpath" | wc -l) jars ($classpath)" >&2
}

running() { [[ -f "$1/pid" ]] && kill -0 "$(cat "$1/pid")" 2> /dev/null; }

start() {
  local dir="$1" python="${PYTHON:-$repo/.venv/bin/python}"
  resolve
  if running "$dir"; then
    echo "already running (pid $(cat "$dir/pid")); source $dir/env.sh" >&2
    return 0
  fi
  [[ -x "$python" ]] || { echo "expected a Python with pyspark at $python, found none (run make setup, or set PYTHON)" >&2; exit 1; }
  rm -rf "$dir/work" "$dir/conf" "$dir/spark-conf" "$dir/metastore_db"
  mkdir -p "$dir/work"
  (cd "$dir/work" && exec setsid java -Xmx1g -Djava.net.preferIPv4Stack=true \
    -Dtest.build.data="$dir/work/yarn" -cp "$(cat "$classpath")" \
    "$repo/deploy/yarn/MiniCluster.java" "$dir/work" "$dir/conf" > "$dir/cluster.log" 2>&1 < /dev/null) &
  echo $! > "$dir/pid"
  for _ in $(seq 1 180); do
    [[ -f "$dir/conf/READY" ]] && break
    if ! running "$dir"; then
      echo "the mini cluster stopped while starting; the end of $dir/cluster.log:" >&2
      tail -20 "$dir/cluster.log" >&2
      exit 1
    fi
    sleep 1
  done
  [[ -f "$dir/conf/READY" ]] || { echo "expected the mini cluster up within 180 s, it was not (see $dir/cluster.log)" >&2; stop "$dir"; exit 1; }

  local default_fs spark_jars
  default_fs="$(head -1 "$dir/conf/READY")"
  spark_jars="$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
  mkdir -p "$dir/spark-conf"
  cat > "$dir/spark-conf/spark-defaults.conf" <<EOF
# This cluster's Spark defaults (one host): Spark's jars and the Python are already on the node.
spark.yarn.jars                 local:$spark_jars/*
spark.pyspark.python            $python
spark.driver.memory             1g
spark.yarn.am.memory            512m
spark.executor.memory           1g
spark.executor.instances        1
spark.executor.cores            2
spark.ui.showConsoleProgress    false
EOF
  cat > "$dir/spark-conf/log4j2.properties" <<'EOF'
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
EOF
  cat > "$dir/env.sh" <<EOF
export HADOOP_CONF_DIR="$dir/conf"
export SPARK_CONF_DIR="$dir/spark-conf"
export MEDALLION_HDFS_ROOT="$default_fs/medallion"
export MEDALLION_METASTORE="$dir/metastore_db"
EOF
  echo "mini cluster up: HDFS $default_fs, YARN ResourceManager $(sed -n 2p "$dir/conf/READY")" >&2
  echo "source $dir/env.sh"
}

stop() {
  local dir="$1"
  if running "$dir"; then
    local pid
    pid="$(cat "$dir/pid")"
    kill "$pid"
    for _ in $(seq 1 5); do kill -0 "$pid" 2> /dev/null || break; sleep 1; done
    kill -9 "$pid" 2> /dev/null || true
  fi
  rm -f "$dir/pid" "$dir/conf/READY"
}

command="${1:-}"
if [[ "$command" == resolve ]]; then
  resolve
  exit 0
fi
dir="$(mkdir -p "${2:-$repo/.minicluster}" && cd "${2:-$repo/.minicluster}" && pwd)"
case "$command" in
  start) start "$dir" ;;
  stop) stop "$dir" ;;
  status) if running "$dir" && [[ -f "$dir/conf/READY" ]]; then echo "running: $(head -1 "$dir/conf/READY")"; else echo "stopped"; exit 1; fi ;;
  *) echo "usage: $0 resolve | start [DIR] | stop [DIR] | status [DIR]" >&2; exit 2 ;;
esac
