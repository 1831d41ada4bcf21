#!/usr/bin/env bash
# Run a `medallion` command under spark-submit, on YARN by default.
#
#   deploy/yarn/submit.sh run bronze --env prod
#   DEPLOY_MODE=cluster deploy/yarn/submit.sh run all --env yarn
#   MASTER='local[2]' deploy/yarn/submit.sh run all --env dev
#
# The package goes to the cluster as a wheel (--py-files) and Delta's jars (plus hadoop-azure
# when the environment's root is an abfss:// URL) as --jars or --packages. The environment is
# loaded and resolved here by `python -m framework.submit` (an invalid one stops before
# submitting); in cluster mode the configuration folder is shipped as an archive, with the
# environment as resolved here, so the driver on the cluster needs none of its ${VAR}s.
#
# The session under spark-submit uses a persistent Hive catalog: the environment's
# `metastore` (a thrift:// metastore service, or a folder for an embedded Derby database on
# a single host), else the cluster's own hive-site.xml. See docs/yarn.md.
#
# Settings (environment variables):
#   MASTER              spark master                          (default: yarn)
#   DEPLOY_MODE         client or cluster                     (default: client)
#   SPARK_SUBMIT        the spark-submit to call              (default: spark-submit on PATH)
#   PYTHON              python that builds the wheel and resolves the configuration; it must
#                       have this package installed           (default: python3)
#   MEDALLION_WHEEL     the package's wheel                   (default: built into $DIST)
#   DIST                where the wheel is built              (default: dist/ of this repository)
#   MEDALLION_CONF      configuration folder                  (default: conf/ of this repository)
#   MEDALLION_ENV       environment, unless --env is given    (default: local)
#   PYSPARK_ENV_ARCHIVE a packed Python environment (venv-pack or conda-pack) holding the
#                       package's dependencies; shipped with --archives and used by the driver
#                       and the executors. Without it the cluster's Python must have them.
#   DELTA_PACKAGE       Delta's Maven coordinate, resolved at submission (default: the jars
#                       the setup cached, else the coordinate matching the pinned pair)
#   HADOOP_AZURE        hadoop-azure's Maven coordinate, for abfss:// roots
#                       (default: the version of Spark's own Hadoop client)
#   SPARK_SUBMIT_ARGS   more spark-submit arguments (--num-executors 4 --executor-memory 8g ...)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
master="${MASTER:-yarn}"
deploy_mode="${DEPLOY_MODE:-client}"
spark_submit="${SPARK_SUBMIT:-spark-submit}"
python="${PYTHON:-python3}"
conf_dir="$(cd "${MEDALLION_CONF:-$repo/conf}" && pwd)"

if [[ $# -eq 0 ]]; then
  echo "usage: $0 <medallion command and arguments>   (e.g. run bronze --env prod)" >&2
  exit 2
fi

# The environment the command runs in: --env NAME / --env=NAME, else $MEDALLION_ENV, else local;
# and whether it asks for Spark's log (--log-level debug).
env_name="${MEDALLION_ENV:-local}"
spark_log=0
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --env) env_name="${args[i + 1]:-}" ;;
    --env=*) env_name="${args[i]#--env=}" ;;
    --log-level) [[ "${args[i + 1]:-}" == debug ]] && spark_log=1 ;;
    --log-level=debug) spark_log=1 ;;
  esac
done

staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
archives=()
if [[ -n "${PYSPARK_ENV_ARCHIVE:-}" ]]; then
  archives=(--archive "$PYSPARK_ENV_ARCHIVE#environment")
fi

# What the resolved environment needs: jars, and in cluster mode the configuration archive.
mapfile -d '' env_args < <("$python" -m framework.submit --conf "$conf_dir" --env "$env_name" \
    --deploy-mode "$deploy_mode" --staging "$staging" --log-config "$staging/log4j2" \
    "${archives[@]}"; echo -n "$?" > "$staging/rc")
if [[ "$(cat "$staging/rc")" != 0 ]]; then
  exit 2
fi

# Spark's log stays off the command's output, as under any runtime (--log-level debug shows
# it): the local JVM (the driver in client mode, YARN's client in cluster mode) starts with
# the quiet log4j2 configuration. In cluster mode the driver's own output is in the
# application's YARN log (yarn logs -applicationId ...).
if [[ "$spark_log" == 0 ]]; then
  export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:-} -Dlog4j2.configurationFile=$(cat "$staging/log4j2")"
fi

# The wheel: given, or built from this repository.
wheel="${MEDALLION_WHEEL:-}"
if [[ -z "$wheel" ]]; then
  dist="${DIST:-$repo/dist}"
  rm -f "$dist"/medallion_lakehouse-*.whl
  "$python" -m pip wheel --quiet --no-deps --wheel-dir "$dist" "$repo" >&2
  wheel="$(ls "$dist"/medallion_lakehouse-*.whl)"
fi

submit=(
  "$spark_submit"
  --master "$master"
  --deploy-mode "$deploy_mode"
  --name "medallion ${args[*]}"
  "${env_args[@]}"
  --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension
  --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog
  --py-files "$wheel"
)

if [[ -n "${PYSPARK_ENV_ARCHIVE:-}" ]]; then
  submit+=(--conf spark.pyspark.python=./environment/bin/python)
  if [[ "$deploy_mode" == "client" ]]; then
    submit+=(--conf "spark.pyspark.driver.python=${PYSPARK_DRIVER_PYTHON:-$python}")
  fi
fi

if [[ "$deploy_mode" == "cluster" ]]; then
  export MEDALLION_ENV="$env_name"
else
  export MEDALLION_CONF="$conf_dir" MEDALLION_ENV="$env_name"
fi

# shellcheck disable=SC2206 # SPARK_SUBMIT_ARGS is split on purpose
extra=(${SPARK_SUBMIT_ARGS:-})
if [[ "$spark_log" == 1 ]]; then
  exec "${submit[@]}" "${extra[@]}" "$repo/deploy/yarn/main.py" "${args[@]}"
fi
# (the JVM names the incubator module Spark's launcher always adds, on stderr, and no option
# silences it: that line is left out, every other one passed on)
set +e
{ "${submit[@]}" "${extra[@]}" "$repo/deploy/yarn/main.py" "${args[@]}" 2>&1 1>&3 3>&- \
    | grep -v --line-buffered '^WARNING: Using incubator modules: ' >&2; } 3>&1
exit "${PIPESTATUS[0]}"
