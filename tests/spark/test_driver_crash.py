"""kill -9 of the Parquet job's driver mid-batch, then a restart from the same checkpoint: Spark
reads every published entry from the output exactly once."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from spark_processes import ProcessGroup, newest, spark_env

pytestmark = pytest.mark.spark

ENTRIES_PER_PARTITION = 3000
MAX_ENTRIES_PER_TRIGGER = 1000  # 6 batches
# Kill in the first half-written batch after one committed; from this batch on, in any batch that
# is in flight (planned, not committed), so that a run never ends before the kill.
LAST_CHANCE_BATCH = 3
POLL_S = 0.01


@dataclass(frozen=True)
class RunState:
    """What a run has left on disk: the newest batch in the checkpoint's offset and commit logs, in
    the sink's ``_spark_metadata``, and part files that no ``_spark_metadata`` file lists."""

    planned: int
    committed: int
    sink_committed: int
    orphans: int

    @property
    def in_flight(self) -> bool:
        """A batch is planned (its offsets logged) and not committed."""
        return self.planned > self.committed

    @property
    def name(self) -> str:
        """The phase of the newest batch."""
        if not self.in_flight:
            return "between batches"
        if self.sink_committed == self.planned:
            return "sink committed, checkpoint commit missing"
        return "half-written" if self.orphans else "planned, no part file yet"

    def __str__(self) -> str:
        return (f"{self.name} (offsets/{self.planned}, commits/{self.committed}, "
                f"_spark_metadata/{self.sink_committed}, {self.orphans} uncommitted part files)")


class RunScanner:
    """Reads a run's state from its checkpoint and output directories."""

    def __init__(self, checkpoint: Path, output: Path) -> None:
        self.checkpoint, self.output = checkpoint, output
        self._listed: dict[str, set[str]] = {}  # _spark_metadata file -> part file names

    def scan(self) -> RunState:
        # Part files before the sink log: a file committed between the two looks is not an orphan.
        on_disk = {path.name for path in self.output.glob("*/part-*")}
        sink_batches = self._sink_log()
        listed = set().union(*self._listed.values())
        return RunState(newest(self.checkpoint / "offsets"), newest(self.checkpoint / "commits"),
                        max(sink_batches, default=-1), len(on_disk - listed))

    def _sink_log(self) -> set[int]:
        log = self.output / "_spark_metadata"
        batches = set()
        for path in log.glob("[0-9]*") if log.exists() else ():
            batches.add(int(path.name.split(".")[0]))
            if path.name not in self._listed:  # written once, by rename: parse it once
                self._listed[path.name] = {
                    Path(json.loads(line)["path"]).name
                    for line in path.read_text().splitlines()[1:] if line.strip()}
        return batches


def job_argv(topic: str, redis_nodes: str, tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "streamgate_spark.jobs.to_parquet", "--master", "local[2]",
            "--topic", topic, "--redis-nodes", redis_nodes, "--partitions", "0,1",
            "--max-entries-per-trigger", str(MAX_ENTRIES_PER_TRIGGER),
            "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "checkpoint"),
            "--available-now"]


def kill_mid_batch(driver: ProcessGroup, scanner: RunScanner, timeout_s: float) -> RunState:
    """Poll the run; SIGKILL the driver's process group at the kill point; the state it left."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert driver.running(), (
            f"the job ended before the kill point, at {scanner.scan()}: publish more entries "
            f"or lower the cap\n{driver.log_tail()}")
        assert time.monotonic() < deadline, f"no kill point in {timeout_s} s: {scanner.scan()}"
        state = scanner.scan()
        if state.committed >= 0 and state.in_flight and (
                state.name == "half-written" or state.planned >= LAST_CHANCE_BATCH):
            break
        time.sleep(POLL_S)
    driver.kill()
    print(f"kill decided at: {state}")
    return scanner.scan()


@pytest.mark.timeout(240)
def test_driver_killed_mid_batch_lands_every_entry_once(
    spark: SparkSession, redis_nodes: str, topic: str, publish: Any, tmp_path: Path
) -> None:
    published = {(p, o) for p in (0, 1) for o in publish(topic, p, ENTRIES_PER_PARTITION)}
    env = spark_env(tmp_path, PYSPARK_SUBMIT_ARGS=" ".join([
        "--conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false",
        "--driver-java-options -XX:TieredStopAtLevel=1", "pyspark-shell"]))
    argv = job_argv(topic, redis_nodes, tmp_path)
    scanner = RunScanner(tmp_path / "checkpoint", tmp_path / "out")

    started = time.monotonic()
    with ProcessGroup(argv, env, tmp_path / "logs" / "killed-driver.log") as driver:
        killed_at = kill_mid_batch(driver, scanner, timeout_s=90)
    print(f"the kill, {time.monotonic() - started:.1f} s after the start, left: {killed_at}")
    assert killed_at.in_flight, f"the kill hit no batch in flight: {killed_at}"

    started = time.monotonic()
    with ProcessGroup(argv, env, tmp_path / "logs" / "restarted-driver.log") as restarted:
        assert restarted.wait(120) == 0, restarted.log_tail()
    restarted_state = scanner.scan()
    print(f"the restart ran {time.monotonic() - started:.1f} s and left: {restarted_state}")
    # the killed attempt's part files stay where they are; readers skip them
    assert restarted_state.orphans >= killed_at.orphans

    rows = spark.read.parquet(str(tmp_path / "out")).select("partition", "offset").collect()
    landed = [(row.partition, row.offset) for row in rows]
    assert len(landed) == len(set(landed)), "an entry landed twice"
    assert set(landed) == published
