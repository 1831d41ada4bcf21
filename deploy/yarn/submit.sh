#!/usr/bin/env bash
# Run a `medallion` command under spark-submit, on YARN by default.
#
#   deploy/yarn/submit.sh run bronze --env prod
#   MASTER='local[2]' deploy/yarn/submit.sh run all --env dev
#
# The package goes to the cluster as a wheel (--py-files), its configuration folder as an
# archive (--archives) and Delta's jars (plus hadoop-azure when the environment's root is an
# abfss:// URL) as --packages, resolved from Maven Central or the cluster's mirror.
#
# Settings (environment variables):
#   MASTER              spark master                          (default: yarn)
#   DEPLOY_MODE         client or cluster                     (default: client)
#   SPARK_SUBMIT        the spark-submit to call              (default: spark-submit on PATH)
#   PYTHON              python used to build the wheel        (default: python3)
#   MEDALLION_WHEEL     the package's wheel                   (default: built into $DIST)
#   DIST                where the wheel is built              (default: dist/ of this repository)
#   MEDALLION_CONF      configuration folder                  (default: conf/ of this repository)
#   MEDALLION_ENV       environment, unless --env is given    (default: local)
#   PYSPARK_ENV_ARCHIVE a packed Python environment (venv-pack or conda-pack) holding the
#                       package's dependencies; shipped with --archives and used by the driver
#                       and the executors. Without it the cluster's Python must have them.
#   DELTA_PACKAGE       Delta's Maven coordinate              (default: matches the pinned pair)
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
delta="${DELTA_PACKAGE:-io.delta:delta-spark_4.2_2.13:4.4.0}"

if [[ $# -eq 0 ]]; then
  echo "usage: $0 <medallion command and arguments>   (e.g. run bronze --env prod)" >&2
  exit 2
fi

# The environment the command runs in: --env NAME / --env=NAME, else $MEDALLION_ENV, else local.
env_name="${MEDALLION_ENV:-local}"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --env) env_name="${args[i + 1]:-}" ;;
    --env=*) env_name="${args[i]#--env=}" ;;
  esac
done
env_file="$conf_dir/environments/$env_name.yaml"
if [[ ! -f "$env_file" ]]; then
  echo "expected an environment file $env_file, found none" >&2
  exit 2
fi

# The wheel: given, or built from this repository.
wheel="${MEDALLION_WHEEL:-}"
if [[ -z "$wheel" ]]; then
  dist="${DIST:-$repo/dist}"
  rm -f "$dist"/medallion_lakehouse-*.whl
  "$python" -m pip wheel --quiet --no-deps --wheel-dir "$dist" "$repo" >&2
  wheel="$(ls "$dist"/medallion_lakehouse-*.whl)"
fi

packages="$delta"
if grep -Eq '^root:.*abfss?://' "$env_file"; then
  hadoop_azure="${HADOOP_AZURE:-}"
  if [[ -z "$hadoop_azure" ]]; then
    spark_home="${SPARK_HOME:-$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null || true)}"
    client="$(ls "$spark_home"/jars/hadoop-client-api-*.jar 2>/dev/null | head -1 || true)"
    version="$(basename "${client:-hadoop-client-api-3.4.1.jar}" .jar)"
    hadoop_azure="org.apache.hadoop:hadoop-azure:${version#hadoop-client-api-}"
  fi
  packages="$packages,$hadoop_azure"
fi

submit=(
  "$spark_submit"
  --master "$master"
  --deploy-mode "$deploy_mode"
  --name "medallion ${args[*]}"
  --packages "$packages"
  --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension
  --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog
  --py-files "$wheel"
)

if [[ -n "${PYSPARK_ENV_ARCHIVE:-}" ]]; then
  submit+=(--archives "$PYSPARK_ENV_ARCHIVE#environment"
           --conf spark.pyspark.python=./environment/bin/python)
  if [[ "$deploy_mode" == "client" ]]; then
    submit+=(--conf "spark.pyspark.driver.python=${PYSPARK_DRIVER_PYTHON:-$python}")
  fi
fi

if [[ "$deploy_mode" == "cluster" ]]; then
  # The driver runs on the cluster: ship the configuration next to it.
  staging="$(mktemp -d)"
  trap 'rm -rf "$staging"' EXIT
  (cd "$conf_dir" && "$python" -m zipfile -c "$staging/medallion-conf.zip" environments tables)
  submit+=(--archives "$staging/medallion-conf.zip#medallion-conf"
           --conf "spark.yarn.appMasterEnv.MEDALLION_CONF=medallion-conf"
           --conf "spark.yarn.appMasterEnv.MEDALLION_ENV=$env_name")
  export MEDALLION_ENV="$env_name"
else
  export MEDALLION_CONF="$conf_dir" MEDALLION_ENV="$env_name"
fi

# shellcheck disable=SC2206 # SPARK_SUBMIT_ARGS is split on purpose
extra=(${SPARK_SUBMIT_ARGS:-})
exec "${submit[@]}" "${extra[@]}" "$repo/deploy/yarn/main.py" "${args[@]}"
