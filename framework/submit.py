"""The spark-submit arguments of a ``medallion`` command, from the resolved configuration.

``deploy/yarn/submit.sh`` calls ``python -m framework.submit`` and appends what it prints
(arguments separated by NUL bytes) to its ``spark-submit`` line:

* Delta's jars and those the layers ask for: the local files resolved once by the setup
  (``--jars``, shipped to the cluster), else their Maven coordinates (``--packages``); plus
  hadoop-azure, matching Spark's Hadoop client, when the environment's root is an ``abfss://`` URL.
* in cluster mode, where the driver runs in a YARN container: the configuration folder as an
  archive, with the environment file replaced by the environment as resolved here. Every
  ``${VAR}`` is replaced by its value on this machine, so the driver needs none of them;
  secrets stay references, resolved by the driver where it runs (never written).

The environment is loaded and validated like any command's, so a bad one fails before anything is
submitted. With ``--log-config FILE`` it also writes into FILE the path of the log4j2 configuration
keeping Spark's log off a command's output (:func:`framework.session.quiet_log_config`), which
``submit.sh`` gives to the local ``spark-submit`` JVM (the driver in client mode, YARN's client in
cluster mode) unless the command asks for ``--log-level debug``.
"""

from __future__ import annotations

import argparse
import os
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import yaml

from framework.config.loader import load_project
from framework.config.model import Environment
from framework.errors import MedallionError
from framework.layers import layer_packages
from framework.session import (
    cached_jars,
    delta_package,
    hadoop_azure_package,
    quiet_log_config,
)

CONF_ARCHIVE_NAME = "medallion-conf"


def spark_hadoop_version() -> str:
    """The version of the Hadoop client inside the installed pyspark."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    for jar in sorted(jars.glob("hadoop-client-api-*.jar")):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    raise MedallionError(f"expected hadoop-client-api-<version>.jar in {jars}, found none")


def dependency_args(env: Environment) -> list[str]:
    """``--jars`` (cached) or ``--packages`` for Delta and the layers' packages, plus
    hadoop-azure for abfss roots."""
    packages = []
    if env.root.startswith(("abfss://", "abfs://")):
        packages.append(os.environ.get("HADOOP_AZURE") or hadoop_azure_package(
            spark_hadoop_version()))
    jars = cached_jars()
    if jars and "DELTA_PACKAGE" not in os.environ:
        args = ["--jars", ",".join(jars)]
    else:
        args = []
        packages[:0] = [os.environ.get("DELTA_PACKAGE") or delta_package(), *layer_packages()]
    if packages:
        args += ["--packages", ",".join(packages)]
    return args


def resolved_conf_archive(conf_dir: Path, env: Environment, target: Path) -> Path:
    """A zip of ``conf_dir``'s tables and of ``env`` as resolved here, for a cluster driver."""
    resolved = env.model_dump(mode="json", exclude_none=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(
            f"environments/{env.name}.yaml",
            "# Resolved by medallion's spark-submit wrapper from the project's environment.\n"
            + yaml.safe_dump(resolved, sort_keys=False),
        )
        tables = conf_dir / "tables"
        for file in sorted(tables.rglob("*")):
            if file.is_file():
                archive.write(file, file.relative_to(conf_dir).as_posix())
    return target


def submit_args(conf_dir: Path, env_name: str, cluster: bool, staging: Path,
                archives: Sequence[str] = ()) -> list[str]:
    """The spark-submit arguments the environment ``env_name`` of ``conf_dir`` needs;
    ``archives`` are more ``--archives`` entries (spark-submit keeps only one such option)."""
    project = load_project(conf_dir, env_name)
    args = dependency_args(project.env)
    shipped = list(archives)
    if cluster:
        archive = resolved_conf_archive(
            conf_dir, project.env, staging / f"{CONF_ARCHIVE_NAME}.zip")
        shipped.append(f"{archive}#{CONF_ARCHIVE_NAME}")
        args += [
            "--conf", f"spark.yarn.appMasterEnv.MEDALLION_CONF={CONF_ARCHIVE_NAME}",
            "--conf", f"spark.yarn.appMasterEnv.MEDALLION_ENV={project.env.name}",
        ]
    if shipped:
        args += ["--archives", ",".join(shipped)]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m framework.submit",
        description="print the spark-submit arguments of an environment, NUL-separated")
    parser.add_argument("--conf", required=True, type=Path, help="configuration folder")
    parser.add_argument("--env", required=True, help="environment name")
    parser.add_argument("--deploy-mode", choices=["client", "cluster"], default="client")
    parser.add_argument("--staging", required=True, type=Path,
                        help="a folder for the files to ship (cluster mode)")
    parser.add_argument("--archive", action="append", default=[],
                        help="another archive to ship (path#name); repeatable")
    parser.add_argument("--log-config", type=Path,
                        help="a file to write the quiet log4j2 configuration's path into")
    args = parser.parse_args(argv)
    try:
        out = submit_args(args.conf, args.env, args.deploy_mode == "cluster", args.staging,
                          args.archive)
        if args.log_config is not None:
            args.log_config.write_text(quiet_log_config(), encoding="utf-8")
    except MedallionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write("".join(f"{a}\0" for a in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
