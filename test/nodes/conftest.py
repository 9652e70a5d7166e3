"""ROS test environment: real rclpy over real Fast DDS, isolated per test session.

Every process of the session (this one and the peers it starts, which inherit the environment) uses the
project's transport profile (config/fastdds_local_large_data.xml: 32 MiB shared memory, UDP and discovery
on loopback only, so no traffic leaves the machine) and a domain id of its own.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

TRANSPORT_PROFILE = Path(__file__).resolve().parents[2] / "config" / "fastdds_local_large_data.xml"
os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(TRANSPORT_PROFILE)
os.environ.pop("FASTDDS_BUILTIN_TRANSPORTS", None)  # would override the profile's transports


def _claim_domain_id() -> tuple[int, object]:
    """A ROS domain id (1..100) no other test process on this machine holds, and the lock that holds it
    for this process's life: concurrent sessions and pytest-xdist workers never share a domain, whatever
    the shell exported (nodes and peers this process starts inherit it)."""
    for domain in range(1, 101):
        lock = open(f"/tmp/wamdiff2_ros_test_domain_{domain}.lock", "w")  # noqa: SIM115 (held until exit)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return domain, lock
    raise RuntimeError("all ROS domain ids 1..100 are held by other test processes")


_DOMAIN_ID, _DOMAIN_LOCK = _claim_domain_id()
os.environ["ROS_DOMAIN_ID"] = str(_DOMAIN_ID)
# Node processes plan on one thread, as this process does (test/conftest.py): with both cores busy, two
# threads per process make every op wait at thread barriers.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import rclpy  # noqa: E402  (after the environment is set)
from rclpy.qos import QoSProfile, qos_profile_sensor_data  # noqa: E402

PEER = Path(__file__).resolve().parents[1] / "support" / "dds_peer.py"


@pytest.fixture(scope="session")
def ros_context():
    """One initialised rclpy context for the whole session."""
    context = rclpy.Context()
    rclpy.init(context=context)
    yield context
    context.try_shutdown()


@pytest.fixture
def ros_namespace(request) -> str:
    """A namespace unique to the test, so topics of different tests never meet."""
    return "/test_" + "".join(c if c.isalnum() else "_" for c in request.node.name).strip("_")[:80]


@dataclass
class Exchange:
    """What a peer process received: raw CDR per topic, and where its message code came from."""

    raw: dict[str, bytes]
    loaded: dict


def _read_records(path: Path) -> dict[str, bytes]:
    data, records = path.read_bytes(), {}
    while data:
        topic, length, data = data.split(b"\n", 2)
        records[topic.decode()] = data[: int(length)]
        data = data[int(length) :]
    return records


@pytest.fixture(scope="session")
def dds_exchange(ros_context, tmp_path_factory):
    """Publish messages from this process until a separate peer process has received one on every topic.

    Returns a function ``exchange(messages, qos="reliable", env=None) -> Exchange`` where ``messages`` maps
    topic -> message instance; ``env`` replaces the peer's environment (e.g. another build of the types).
    """
    node = rclpy.create_node("dds_exchange_publisher", context=ros_context)
    tmp_path = tmp_path_factory.mktemp("dds")

    def exchange(messages: dict, qos: str = "reliable", env: dict | None = None) -> Exchange:
        profile = qos_profile_sensor_data if qos == "sensor" else QoSProfile(depth=10)
        publishers = {
            topic: node.create_publisher(type(msg), topic, profile) for topic, msg in messages.items()
        }
        out = tmp_path / f"received_{len(list(tmp_path.iterdir()))}.bin"
        pairs = [f"{topic}={_type_name(type(msg))}" for topic, msg in messages.items()]
        peer = subprocess.Popen(
            [sys.executable, str(PEER), str(out), qos, *pairs], stdout=subprocess.PIPE, text=True, env=env
        )
        try:
            while peer.poll() is None:  # the peer exits once it has one message per topic
                for topic, publisher in publishers.items():
                    publisher.publish(messages[topic])
                time.sleep(0.1)
            stdout = peer.stdout.read()
        finally:
            if peer.poll() is None:
                peer.kill()
            for publisher in publishers.values():
                node.destroy_publisher(publisher)
        assert peer.returncode == 0, f"peer received {len(_read_records(out))} of {len(messages)} topics"
        return Exchange(_read_records(out), json.loads(stdout.strip().splitlines()[-1]))

    yield exchange
    node.destroy_node()


def _type_name(cls) -> str:
    return f"{cls.__module__.split('.')[0]}/msg/{cls.__name__}"


@pytest.fixture
def route_model(tmp_path) -> Path:
    """The bundled model's weights in a folder of their own, told to read the route (``branch_route``): a
    model that plans only with a route, for the node's and the bench's route paths."""
    from wamdiff2_ros.model.default import default_model_dir
    from wamdiff2_ros.model.prompt import COMMAND_RULE_KEY, ROUTE_COMMAND_RULE

    folder = tmp_path / "route_model"
    shutil.copytree(default_model_dir(), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {COMMAND_RULE_KEY: ROUTE_COMMAND_RULE}))
    return folder


@pytest.fixture
def route_plan_model(tmp_path) -> Path:
    """The bundled model's weights told that they write their plans along the route (``model.plan_frame``):
    a model that plans only with a route polyline, for the node's path of such models."""
    from wamdiff2_ros.model.default import default_model_dir
    from wamdiff2_ros.model.plan_frame import PLAN_FRAME_KEY

    folder = tmp_path / "route_plan_model"
    shutil.copytree(default_model_dir(), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {PLAN_FRAME_KEY: "route"}))
    return folder
