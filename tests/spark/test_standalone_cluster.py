"""The Parquet job submitted with spark-submit to a Spark standalone cluster (a master and two
workers on loopback) runs on the workers' executors and lands every entry exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from spark_processes import ROOT, SPARK_HOME, ProcessGroup, spark_env, wait_for

from streamgate_devstack.ports import free_ports

pytestmark = pytest.mark.spark

APP_NAME = "streamgate-to-parquet"  # the job's
# Short-lived JVMs on 2 cores: the C1 compiler alone starts them sooner.
QUICK_JVM = "-XX:TieredStopAtLevel=1"
QUICK_DAEMONS = {"SPARK_DAEMON_JAVA_OPTS": QUICK_JVM, "SPARK_DAEMON_MEMORY": "512m"}


@dataclass
class Standalone:
    """A running standalone cluster: where to submit, where its state and the workers' dirs are."""

    master_url: str
    json_url: str
    worker_dirs: list[Path]

    def state(self) -> dict[str, Any]:
        """The master's JSON (workers, active and completed apps); empty while its UI is not up."""
        try:
            with urllib.request.urlopen(self.json_url, timeout=5) as response:
                result: dict[str, Any] = json.load(response)
        except OSError:
            return {}
        return result

    def alive_workers(self) -> int:
        """How many workers the master lists as ALIVE."""
        return sum(worker["state"] == "ALIVE" for worker in self.state().get("workers", []))


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    """A master and two workers (1 core, 1g each), started with spark-class, killed by group."""
    port, ui_port, *worker_ui_ports = free_ports(4)
    cluster = Standalone(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}/json",
                         [tmp_path / f"worker-{n}" for n in range(len(worker_ui_ports))])
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    started: list[ProcessGroup] = []
    try:
        started.append(ProcessGroup(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(ui_port)],
            spark_env(tmp_path, **QUICK_DAEMONS), tmp_path / "logs" / "master.log"))
        # the workers retry until the master listens: no wait for it in between
        for worker_dir, worker_ui in zip(cluster.worker_dirs, worker_ui_ports, strict=True):
            started.append(ProcessGroup(
                [spark_class, "org.apache.spark.deploy.worker.Worker", cluster.master_url,
                 "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                 "--webui-port", str(worker_ui)],
                spark_env(tmp_path, SPARK_WORKER_DIR=str(worker_dir), **QUICK_DAEMONS),
                tmp_path / "logs" / f"{worker_dir.name}.log"))
        wait_for(lambda: cluster.alive_workers() == 2, 90, "two ALIVE workers")
        yield cluster
    finally:
        for process in reversed(started):
            process.kill()


def package_zip(tmp_path: Path) -> Path:
    """``python -m zipfile -c streamgate.zip pipeline/streamgate_spark storage`` in the repository
    root."""
    archive = tmp_path / "streamgate.zip"
    subprocess.run([sys.executable, "-m", "zipfile", "-c", str(archive),
                    "pipeline/streamgate_spark", "storage"],
                   cwd=ROOT, check=True)
    return archive


def executor_dirs(cluster: Standalone, app_id: str) -> list[Path]:
    """The working directories of the app's executors on every worker."""
    return sorted(path for worker_dir in cluster.worker_dirs
                  for path in (worker_dir / app_id).glob("[0-9]*"))


def ran_tasks(executor_dir: Path) -> bool:
    return "Finished task" in (executor_dir / "stderr").read_text(errors="replace")


@pytest.mark.timeout(240)
def test_standalone_cluster_lands_every_entry_once(
    standalone: Standalone, spark: SparkSession, redis_nodes: str, topic: str, publish: Any,
    tmp_path: Path
) -> None:
    published = {(0, o) for o in publish(topic, 0, 120)} | {(1, o) for o in publish(topic, 1, 80)}
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    submit = ProcessGroup(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", standalone.master_url,
         "--py-files", str(package_zip(tmp_path)),
         "--conf", f"spark.pyspark.python={sys.executable}",
         "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1",
         "--conf", "spark.cores.max=2", "--conf", "spark.ui.enabled=false",
         # no task before both executors are up: each worker runs some
         "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
         "--driver-memory", "512m", "--driver-java-options", QUICK_JVM,
         "--conf", f"spark.executor.extraJavaOptions={QUICK_JVM}",
         "pipeline/streamgate_spark/jobs/to_parquet.py",
         "--topic", topic, "--redis-nodes", redis_nodes,
         "--partitions", "0,1", "--max-entries-per-trigger", "50",
         "--output", str(output), "--checkpoint", str(checkpoint), "--available-now"],
        spark_env(tmp_path), tmp_path / "logs" / "spark-submit.log")
    with submit:
        assert submit.wait(150) == 0, submit.log_tail()

    (app,) = wait_for(lambda: [app for app in standalone.state()["completedapps"]
                               if app["name"] == APP_NAME], 30, "the app among completedapps")
    assert app["state"] == "FINISHED"
    executors = executor_dirs(standalone, app["id"])
    # one executor per worker (1 core each, spread out), each fetched the zip and ran tasks
    assert [executor.parent.parent for executor in executors] == standalone.worker_dirs
    assert all((executor / "streamgate.zip").exists() for executor in executors)
    assert all(ran_tasks(executor) for executor in executors), executors

    rows = spark.read.parquet(str(output)).select("partition", "offset").collect()
    landed = [(row.partition, row.offset) for row in rows]
    assert len(landed) == len(published)
    assert set(landed) == published
