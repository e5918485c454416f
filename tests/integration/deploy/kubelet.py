"""A small kubelet for the deployment tests: the pods of a rendered chart run with podman exactly as
rendered (command, args, env, security context, volumes, probes) on one network, with the pods'
DNS names as host entries, since no Kubernetes API server can be had here."""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from containers import RUN_BASE, load_helper, podman

Manifest = dict[str, Any]
# a Service's proxy: argv "<port>=<ip>:<port>,<ip>:<port>" per port; each connection goes to a
# random backend, bytes copied both ways until either side closes
PROXY = """
import asyncio, random, sys

async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()

def handler(backends):
    async def handle(reader, writer):
        host, port = random.choice(backends).rsplit(":", 1)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer),
                             return_exceptions=True)
    return handle

async def main():
    servers = []
    for route in sys.argv[1:]:
        port, backends = route.split("=", 1)
        servers.append(await asyncio.start_server(handler(backends.split(",")), "0.0.0.0",
                                                  int(port)))
    await asyncio.gather(*(server.serve_forever() for server in servers))

asyncio.run(main())
"""
# $(VAR) in command and args, expanded from the container's env as the kubelet does
VAR_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@dataclass
class Pod:
    """One pod of a workload: its name, IP, spec and the podman container running it."""

    name: str
    workload: str
    ip: str
    spec: Manifest
    hostnames: tuple[str, ...] = ()
    component: str = ""
    job: bool = False  # runs to completion: a Job's or a bare Pod's
    labels: dict[str, str] = field(default_factory=dict)
    hook: str = ""  # the helm.sh/hook annotation: run by Kubelet.run_hook, not at start
    hook_delete: str = ""  # its helm.sh/hook-delete-policy
    template: str = ""  # the pod template as rendered: a change rolls the pod
    container: str = ""
    started_at: float = 0.0

    @property
    def url(self) -> str:
        """http://<pod IP>:<first container port>."""
        return f"http://{self.ip}:{self.main['ports'][0]['containerPort']}"

    @property
    def main(self) -> Manifest:
        containers = self.spec["containers"]
        assert len(containers) == 1, "one container per pod is what this kubelet runs"
        main: Manifest = containers[0]
        return main


@dataclass
class Kubelet:
    """Runs rendered Deployments, StatefulSets and Jobs as podman containers on a private network;
    every container and the network go at ``close``."""

    objects: list[Manifest]
    workdir: Path
    namespace: str
    cluster_domain: str = "cluster.local"
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    network: str = ""
    subnet: str = ""
    proxy_image: str = RUN_BASE  # any image with python3: the Services' proxies run in it
    pods: dict[str, Pod] = field(default_factory=dict)
    services: dict[str, str] = field(default_factory=dict)  # Service name -> cluster IP
    _addresses: dict[str, str] = field(default_factory=dict)  # pod name -> IP, across revisions
    job_attempts: int = 0
    job_logs: dict[str, str] = field(default_factory=dict)  # the successful run's, per Job
    _names: list[str] = field(default_factory=list)

    def __enter__(self) -> Kubelet:
        self.network = f"sg-kube-{self.run_id}"
        self.subnet = free_subnet()
        podman("network", "create", f"--subnet={self.subnet}.0/24", self.network)
        self._plan_pods()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._names:
            podman("rm", "--force", "--time=0", *sorted(set(self._names)), check=False,
                   timeout_s=180)
        if self.network:
            podman("network", "rm", "--force", self.network, check=False)
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- the objects ---------------------------------------------------------------------------
    def kind(self, kind: str) -> list[Manifest]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def config_data(self, kind: str, name: str) -> dict[str, str] | None:
        """A ConfigMap's or Secret's keys, or None when there is no such object."""
        for obj in self.kind(kind):
            if obj["metadata"]["name"] == name:
                data: dict[str, str] = dict(obj.get("data") or {})
                if kind == "Secret":  # data is base64 in a Secret, stringData plain
                    data = {key: base64.b64decode(value).decode() for key, value in data.items()}
                data.update(obj.get("stringData") or {})
                return data
        return None

    def _plan_pods(self) -> None:
        """Every pod the workloads make, each with its IP; StatefulSet pods with their DNS names;
        hook Jobs and Pods (run by ``run_hook``) too."""
        for obj in self.objects:
            kind, name = obj["kind"], obj["metadata"]["name"]
            if kind == "StatefulSet":
                service = obj["spec"]["serviceName"]
                for index in range(obj["spec"]["replicas"]):
                    fqdn = f"{name}-{index}.{service}.{self.namespace}.svc.{self.cluster_domain}"
                    self._add(obj, f"{name}-{index}", (fqdn,))
            elif kind == "Deployment":
                for index in range(obj["spec"].get("replicas", 1)):
                    self._add(obj, f"{name}-{index}")
            elif kind in {"Job", "Pod"}:
                self._add(obj, name)
        for service in self.kind("Service"):
            name = service["metadata"]["name"]
            if service["spec"].get("clusterIP") != "None" and name not in self.services:
                self.services[name] = f"{self.subnet}.{254 - len(self.services)}"

    def _add(self, obj: Manifest, name: str, hostnames: tuple[str, ...] = ()) -> None:
        """A pod of the plan; one of an earlier revision keeps its IP."""
        if name not in self._addresses:
            self._addresses[name] = f"{self.subnet}.{10 + len(self._addresses)}"
        ip = self._addresses[name]
        template = obj if obj["kind"] == "Pod" else obj["spec"]["template"]
        labels = dict(template.get("metadata", {}).get("labels", {}))
        annotations = obj["metadata"].get("annotations") or {}
        self.pods[name] = Pod(name, obj["metadata"]["name"], ip, template["spec"], hostnames,
                              labels.get("app.kubernetes.io/component", ""),
                              job=obj["kind"] in {"Job", "Pod"}, labels=labels,
                              hook=annotations.get("helm.sh/hook", ""),
                              hook_delete=annotations.get("helm.sh/hook-delete-policy", ""),
                              template=json.dumps(template, sort_keys=True))

    def component(self, name: str) -> list[Pod]:
        """The pods labelled app.kubernetes.io/component=name."""
        return [pod for pod in self.pods.values() if pod.component == name]

    def start_chart(self) -> str:
        """Every pod in the order Kubernetes would make them ready: the datastores and the Job that
        forms the Redis Cluster at once, the gateways once their init container sees it formed.
        How long each step took."""
        started = time.monotonic()
        datastores = self.component("redis") + self.component("etcd")
        for pod in datastores:
            self.start(pod)
        for job in (pod for pod in self.pods.values() if pod.job and not pod.hook):
            self.job_attempts += self.run_job(job)
        self.wait_ready(datastores)
        formed = time.monotonic()
        gateways = self.component("gateway")
        for pod in gateways:
            self.start(pod)
        self.wait_ready(gateways)
        self.start_services()
        return (f"datastores and cluster formed in {formed - started:.1f} s, gateways ready "
                f"{time.monotonic() - formed:.1f} s later")

    def upgrade(self, objects: list[Manifest]) -> str:
        """``helm upgrade`` to these objects: the pre-upgrade hooks, the new pods started, the
        revision's Jobs run, then the pods whose template changed rolled one at a time (highest
        ordinal first); how long each step took."""
        started, before = time.monotonic(), self.pods
        self.objects, self.pods = objects, {}
        self._plan_pods()
        for name, pod in self.pods.items():
            if name in before and not pod.job:
                pod.container, pod.started_at = before[name].container, before[name].started_at
        self.run_hook("pre-upgrade")
        hooked = time.monotonic()
        running = [pod for pod in self.pods.values() if not pod.job]
        for pod in running:
            if pod.name not in before:
                self.start(pod)
        for job in self.pods.values():
            if job.job and not job.hook and job.name not in before:
                self.job_attempts += self.run_job(job)
        for pod in sorted(running, key=lambda pod: pod.name, reverse=True):
            if pod.name in before and pod.template != before[pod.name].template:
                self.stop(pod)
                podman("rm", "--force", pod.container, check=False)
                self.start(pod)
                self.wait_ready([pod])
        self.wait_ready(running)
        return (f"pre-upgrade hooks {hooked - started:.1f} s, pods and jobs "
                f"{time.monotonic() - hooked:.1f} s")

    def run_hook(self, hook: str, timeout_s: float = 300) -> list[str]:
        """Every hook Pod or Job for ``hook`` (e.g. "test", "post-upgrade") to success; their
        logs."""
        logs = []
        for pod in self.pods.values():
            if hook in pod.hook.split(","):
                policy = pod.hook_delete.split(",")
                if "before-hook-creation" in policy:  # the previous revision's run
                    podman("rm", "--force", f"{self.run_id}-{pod.name}", check=False)
                self.run_job(pod, timeout_s)
                logs.append(self.logs(pod))
                if "hook-succeeded" in policy:
                    podman("rm", "--force", pod.container, check=False)
        return logs

    def start_services(self) -> None:
        """A proxy per Service with a cluster IP, as kube-proxy's userspace mode was: it listens on
        the Service's IP and ports and forwards each connection to a pod its selector matches."""
        for service in self.kind("Service"):
            name = service["metadata"]["name"]
            if name not in self.services:
                continue
            selector = service["spec"]["selector"]
            pods = [pod for pod in self.pods.values()
                    if not pod.job and selector.items() <= pod.labels.items()]
            routes = [f"{port['port']}=" + ",".join(
                f"{pod.ip}:{self._port(pod, port.get('targetPort', port['port']))}" for pod in pods)
                for port in service["spec"]["ports"]]
            container = f"{self.run_id}-svc-{name}"
            self._names.append(container)
            podman("run", "--detach", f"--name={container}", f"--network={self.network}",
                   f"--ip={self.services[name]}", "--user=0", "--read-only",
                   "--cap-drop=all", "--cap-add=net_bind_service",
                   f"--entrypoint={json.dumps(['python3', '-c', PROXY])}",
                   self.proxy_image, *routes)

    # -- running -------------------------------------------------------------------------------
    def start(self, pod: Pod) -> None:
        """The pod's init containers one after another to completion, then its container."""
        for init in pod.spec.get("initContainers") or []:
            name = f"{self.run_id}-{pod.name}-{init['name']}"
            self._run(pod, init, name)
            self.wait_exit(name, timeout_s=300, expect=0)
            podman("rm", "--force", name, check=False)
        pod.container = f"{self.run_id}-{pod.name}"
        self._run(pod, pod.main, pod.container)
        pod.started_at = time.monotonic()

    def run_job(self, pod: Pod, timeout_s: float = 300) -> int:
        """A Job's pod, rerun on failure up to its backoffLimit (restartPolicy OnFailure) within its
        activeDeadlineSeconds, or a bare Pod once within ``timeout_s``; the attempts it took."""
        jobs = [obj for obj in self.kind("Job") if obj["metadata"]["name"] == pod.workload]
        attempts = jobs[0]["spec"].get("backoffLimit", 6) + 1 if jobs else 1  # a bare Pod: once
        if jobs:
            timeout_s = jobs[0]["spec"].get("activeDeadlineSeconds", timeout_s)
        deadline = time.monotonic() + timeout_s
        logs = ""
        for attempt in range(1, attempts + 1):
            self.start(pod)
            if self.wait_exit(pod.container, max(deadline - time.monotonic(), 1)) == 0:
                self.job_logs[pod.name] = self.logs(pod)
                return attempt
            logs = self.logs(pod)
            self.job_logs[f"{pod.name} (attempt {attempt}, failed)"] = logs
            podman("rm", "--force", pod.container, check=False)
        raise AssertionError(f"job {pod.name} failed {attempts} times; the last:\n{logs}")

    def stop(self, pod: Pod) -> float:
        """SIGTERM, then SIGKILL after terminationGracePeriodSeconds, as the kubelet stops a pod;
        seconds it took."""
        grace = pod.spec.get("terminationGracePeriodSeconds", 30)
        started = time.monotonic()
        podman("stop", f"--time={grace}", pod.container, timeout_s=grace + 30)
        return time.monotonic() - started

    def inspect(self, pod: Pod, template: str) -> str:
        """A Go template over the pod's container's state (``podman inspect --format``)."""
        return podman("inspect", f"--format={template}", pod.container, check=False).stdout.strip()

    def exit_code(self, pod: Pod) -> int:
        return int(self.inspect(pod, "{{.State.ExitCode}}"))

    def running(self, pod: Pod) -> bool:
        return self.inspect(pod, "{{.State.Running}}") == "true"

    def wait_exit(self, name: str, timeout_s: float, expect: int | None = None) -> int:
        done = podman("wait", name, timeout_s=timeout_s)
        code = int(done.stdout.strip().splitlines()[-1])
        if expect is not None and code != expect:
            logs = podman("logs", name, check=False)
            raise AssertionError(f"{name} exited {code}:\n{logs.stdout}\n{logs.stderr}")
        return code

    def exec(self, pod: Pod, *command: str, check: bool = True) -> str:
        """A command's output inside the pod's running container (with the container's env)."""
        return podman("exec", pod.container, *command, check=check).stdout

    def logs(self, pod: Pod) -> str:
        done = podman("logs", pod.container, check=False)
        return done.stdout + done.stderr

    def _run(self, pod: Pod, container: Manifest, name: str) -> None:
        env = self._env(pod, container)
        flags = [f"--name={name}", f"--network={self.network}", f"--ip={pod.ip}",
                 f"--hostname={pod.name}", *self._host_entries(),
                 *self._security_flags(pod.spec, container), *self._volume_flags(pod, container),
                 *(f"--env={key}={value}" for key, value in env.items())]
        command = [expand(part, env) for part in container.get("command") or []]
        args = [expand(part, env) for part in container.get("args") or []]
        if command:
            flags.append("--entrypoint=" + json.dumps(command))
        self._names.append(name)
        podman("run", "--detach", *flags, container["image"], *args)

    def _host_entries(self) -> list[str]:
        """Each StatefulSet pod's DNS name, and each Service's names (short, with the namespace,
        and fully qualified) for its cluster IP."""
        entries = [f"--add-host={host}:{pod.ip}" for pod in self.pods.values()
                   for host in pod.hostnames]
        for name, ip in self.services.items():
            qualified = f"{name}.{self.namespace}"
            entries += [f"--add-host={host}:{ip}" for host in (
                name, qualified, f"{qualified}.svc", f"{qualified}.svc.{self.cluster_domain}")]
        return entries

    # -- env -----------------------------------------------------------------------------------
    def _env(self, pod: Pod, container: Manifest) -> dict[str, str]:
        """envFrom first, then env (which wins), as Kubernetes builds it."""
        env: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            kind, ref = (("ConfigMap", source["configMapRef"]) if "configMapRef" in source
                         else ("Secret", source["secretRef"]))
            data = self.config_data(kind, ref["name"])
            assert data is not None or ref.get("optional"), f"{kind} {ref['name']} missing"
            env.update({key: str(value) for key, value in (data or {}).items()})
        for entry in container.get("env") or []:
            value = self._env_value(pod, container, entry, env)
            if value is not None:
                env[entry["name"]] = value
        return env

    def _env_value(self, pod: Pod, container: Manifest, entry: Manifest,
                   env: dict[str, str]) -> str | None:
        if "value" in entry:
            return expand(str(entry["value"]), env)
        source = entry["valueFrom"]
        if "resourceFieldRef" in source:  # the container's own memory limit, in bytes
            assert source["resourceFieldRef"]["resource"] == "limits.memory", source
            return str(quantity_bytes(container["resources"]["limits"]["memory"]))
        if "fieldRef" in source:
            return {"metadata.name": pod.name, "metadata.namespace": self.namespace,
                    "status.podIP": pod.ip}[source["fieldRef"]["fieldPath"]]
        kind, ref = (("ConfigMap", source["configMapKeyRef"]) if "configMapKeyRef" in source
                     else ("Secret", source["secretKeyRef"]))
        data = self.config_data(kind, ref["name"]) or {}
        if ref["key"] not in data:
            assert ref.get("optional"), f"{kind} {ref['name']} has no key {ref['key']}"
            return None
        return str(data[ref["key"]])

    # -- security context and volumes ----------------------------------------------------------
    @staticmethod
    def _security_flags(spec: Manifest, container: Manifest) -> list[str]:
        pod_context = spec.get("securityContext") or {}
        context = pod_context | (container.get("securityContext") or {})
        user, group = context.get("runAsUser"), context.get("runAsGroup")
        if context.get("runAsNonRoot"):
            assert user not in (None, 0), "runAsNonRoot needs a numeric non-root runAsUser"
        flags = []
        if user is not None:
            flags.append(f"--user={user}" + (f":{group}" if group is not None else ""))
        if pod_context.get("fsGroup") is not None:
            flags.append(f"--group-add={pod_context['fsGroup']}")
        if context.get("readOnlyRootFilesystem"):
            flags += ["--read-only", "--read-only-tmpfs=false"]
        if context.get("allowPrivilegeEscalation") is False:
            flags.append("--security-opt=no-new-privileges")
        capabilities = context.get("capabilities") or {}
        flags += [f"--cap-drop={cap.lower()}" for cap in capabilities.get("drop") or []]
        flags += [f"--cap-add={cap.lower()}" for cap in capabilities.get("add") or []]
        return flags

    def _volume_flags(self, pod: Pod, container: Manifest) -> list[str]:
        volumes = {volume["name"]: volume for volume in pod.spec.get("volumes") or []}
        fs_group = (pod.spec.get("securityContext") or {}).get("fsGroup")
        flags = []
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"], {"persistentVolumeClaim": {}})
            target, read_only = mount["mountPath"], bool(mount.get("readOnly"))
            if "emptyDir" in volume and volume["emptyDir"].get("medium") == "Memory":
                size = volume["emptyDir"].get("sizeLimit", "64Mi").replace("i", "")
                flags.append(f"--tmpfs={target}:rw,size={size},mode=1777")
                continue
            source = self._volume_dir(pod, mount["name"], volume, fs_group)
            flags.append(f"--volume={source}:{target}:{'ro' if read_only else 'rw'}")
        return flags

    def _volume_dir(self, pod: Pod, name: str, volume: Manifest, fs_group: int | None) -> Path:
        """A host folder for the volume: a ConfigMap's or Secret's files, an emptyDir, or the pod's
        claim from the volumeClaimTemplates (kept across restarts of the pod)."""
        folder = self.workdir / pod.name / name
        if folder.exists():
            return folder
        folder.mkdir(parents=True)
        group = -1 if fs_group is None else fs_group
        if "configMap" in volume or "secret" in volume:
            kind, source = (("ConfigMap", volume["configMap"]) if "configMap" in volume
                            else ("Secret", volume["secret"]))
            data = self.config_data(kind, source.get("name") or source.get("secretName")) or {}
            items = source.get("items") or [{"key": key, "path": key} for key in data]
            mode = source.get("defaultMode", 0o644)
            for item in items:
                path = folder / item["path"]
                path.write_text(data[item["key"]])
                os.chown(path, 0, group)
                path.chmod(item.get("mode", mode))
            folder.chmod(0o755)
            return folder
        # an emptyDir or a claim: writable by the fsGroup (setgid, as fsGroup ownership does)
        os.chown(folder, 0, group)
        folder.chmod(0o2777 if "emptyDir" in volume else 0o2775)
        return folder

    # -- probes --------------------------------------------------------------------------------
    def probe(self, pod: Pod, kind: str) -> bool:
        """Runs the container's livenessProbe or readinessProbe once (True without one)."""
        spec = pod.main.get(kind)
        if spec is None:
            return True
        timeout = spec.get("timeoutSeconds", 1)
        if "exec" in spec:
            done = podman("exec", pod.container, *spec["exec"]["command"], check=False,
                          timeout_s=timeout + 5)
            return done.returncode == 0
        if "tcpSocket" in spec:
            try:
                socket.create_connection((pod.ip, self._port(pod, spec["tcpSocket"]["port"])),
                                         timeout=timeout).close()
            except OSError:
                return False
            return True
        http = spec["httpGet"]
        url = (f"{http.get('scheme', 'HTTP').lower()}://{pod.ip}:{self._port(pod, http['port'])}"
               f"{http.get('path', '/')}")
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                status: int = response.status
        except (urllib.error.URLError, OSError):
            return False
        return 200 <= status < 400

    def wait_ready(self, pods: list[Pod], timeout_s: float = 120) -> None:
        """Until every pod's readinessProbe passes; a pod that exits fails at once."""
        waiting, deadline = list(pods), time.monotonic() + timeout_s
        while waiting and time.monotonic() < deadline:
            for pod in list(waiting):
                assert self.running(pod), f"{pod.name} exited:\n{self.logs(pod)}"
                if self.probe(pod, "readinessProbe"):
                    waiting.remove(pod)
            time.sleep(0.5)
        assert not waiting, "never ready: " + "\n\n".join(
            f"{pod.name}:\n{self.logs(pod)[-3000:]}" for pod in waiting)

    @staticmethod
    def _port(pod: Pod, port: int | str) -> int:
        if isinstance(port, int):
            return port
        return int(next(entry["containerPort"] for entry in pod.main.get("ports") or []
                        if entry.get("name") == port))


def render_chart(values: Manifest, revision: int = 1) -> tuple[list[Manifest], str]:
    """The chart's objects rendered with these values at this revision (1: the install; later:
    an upgrade) by tests/helm/helm_render.py, as `helm template` would, and their namespace."""
    helm_render = load_helper("tests/helm/helm_render.py")
    objects: list[Manifest] = helm_render.manifests(values, revision)
    return objects, str(helm_render.NAMESPACE)


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: a defined variable is replaced, $$ is a literal $."""
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))
    return VAR_REFERENCE.sub(replace, text)


def quantity_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity ("2Gi", "512M", "1000") in bytes."""
    scales = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4,
              "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}
    for suffix, scale in scales.items():
        if quantity.endswith(suffix):
            return int(float(quantity.removesuffix(suffix)) * scale)
    return int(quantity)


def free_subnet() -> str:
    """A 10.89.x prefix no podman network or host route uses."""
    used = podman("network", "ls", "--format={{range .Subnets}}{{.Subnet}} {{end}}").stdout
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True,
                            check=False).stdout
    for third in random.sample(range(100, 250), 150):
        prefix = f"10.89.{third}"
        if f"{prefix}." not in used and f"{prefix}." not in routes:
            return prefix
    raise AssertionError("no free 10.89.x.0/24 subnet")
