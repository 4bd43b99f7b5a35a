"""A stand-in for the Go K8s4r v1alpha1 agent (Tinker2018/k8s4r, pkg/agent and cmd/agent), on the wire exactly as
that agent behaves, to show its robots keep working through our bridge. No machine here can build the Go agent
(its modules are not in Debian), so this reproduces what the bridge sees of it, habits included:

- it registers on k8s4r/register with its whole device inventory (swap, disks, network interfaces), no timestamp
  and no running tasks, and does nothing else until the answer on k8s4r/robots/{id}/response (10 s, then it fails);
- it sends no presence and sets no last will; it heartbeats on k8s4r/heartbeat with its device figures every time
  and `runningTasks: null`;
- its task reports name the robot `robotName`, carry no `seq`, and give `exitCode: 0` when there is none;
- its driver's event callback reports `state: running` for every driver event, including the ones that come after
  the process ended; its monitor ticks every 5 s, reports `running` again while the process lives, and reports the
  real final state (`exited` with the exit code) only on the first tick after the process ended;
- on `action: delete` it kills the process and reports nothing.

The tasks are real child processes in their own process groups, and every one is killed by stop().
"""
import datetime
import json
import os
import random
import signal
import subprocess
import threading
import time

import paho.mqtt.client as mqtt

GO_TIME_ZONE = datetime.timezone(datetime.timedelta(hours=8))  # Go's time.Now() marshals with the local offset


def go_now():
    return datetime.datetime.now(GO_TIME_ZONE).isoformat()


def device_info(robot_id):
    return {"hostname": robot_id,
            "platform": {"os": "linux", "arch": "arm64", "platform": "debian", "platformFamily": "debian",
                         "platformVersion": "12.8", "kernelVersion": "6.1.0-28-arm64", "kernelArch": "aarch64"},
            "cpu": {"physicalCores": 4, "logicalCores": 4, "modelName": "Cortex-A72", "vendor": "ARM",
                    "mhz": 1800.0, "usagePercent": round(random.uniform(0, 100), 2)},
            "memory": {"total": 8226324480, "available": random.randint(5_000_000_000, 7_000_000_000),
                       "used": random.randint(1_000_000_000, 3_000_000_000), "free": 5100000000,
                       "usagePercent": round(random.uniform(0, 100), 2)},
            "swap": {"total": 0, "used": 0, "free": 0, "usagePercent": 0},
            "disks": [{"device": "/dev/mmcblk0p2", "mountPoint": "/", "fsType": "ext4", "total": 31_000_000_000,
                       "used": random.randint(1, 9) * 1_000_000_000, "usagePercent": 20.1}],
            "networkInterfaces": [{"name": "wlan0", "addresses": ["192.168.1.23/24"], "bytesSent": 1,
                                   "bytesRecv": 2}]}


class GoK8s4rAgent:
    def __init__(self, broker, robot_id, token, heartbeat_every=1.0, monitor_every=5.0, subscribe_after=0.0):
        self.broker, self.robot_id, self.token = broker, robot_id, token
        # The Go agent starts its task manager, which subscribes to its dispatches, seconds after it registered;
        # its heartbeats begin after that.
        self.subscribe_after = subscribe_after
        self.heartbeat_every, self.monitor_every = heartbeat_every, monitor_every
        self.lock = threading.Lock()
        self.tasks = {}  # uid -> Popen, while the agent holds the task
        self.started = {}  # uid -> Popen, the last process started for each task
        self.start_counts = {}  # uid -> how many times it was started
        self.processes = []  # every process it started, each killed by stop()
        self.sent = []  # (uid, report) in the order sent
        self.responses = []
        self.response = threading.Event()
        self.stopping = threading.Event()
        self.client = mqtt.Client(client_id=f"go-agent-{robot_id}", clean_session=True)
        self.client.on_message = self._on_message
        self.acked = set()
        self.acked_changed = threading.Condition()
        self.client.on_subscribe = self._on_subscribe
        self.threads = []

    # ---- the agent's life ----------------------------------------------------------------
    def start(self):
        connected = threading.Event()
        self.client.on_connect = lambda *args: connected.set()
        self.client.connect("127.0.0.1", self.broker.port)
        self.client.loop_start()
        assert connected.wait(10), "the Go agent stand-in did not connect"
        self._subscribe(f"k8s4r/robots/{self.robot_id}/response")
        register = {"robotId": self.robot_id, "token": self.token, "deviceInfo": device_info(self.robot_id)}
        self._publish("k8s4r/register", register)
        if not self.response.wait(10):
            raise AssertionError("registration timeout (the Go agent gives up after 10 s)")
        if not self.responses[-1].get("success"):
            raise AssertionError(f"registration failed: {self.responses[-1].get('message')}")
        time.sleep(self.subscribe_after)
        self._subscribe(f"k8s4r/robots/{self.robot_id}/tasks/dispatch")
        for loop in (self._heartbeats, self._monitor):
            thread = threading.Thread(target=loop, daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(10)
        with self.lock:
            processes = list(self.processes)
        for process in processes:
            self._kill(process)
        self.client.loop_stop()
        self.client.disconnect()

    def reports(self, uid):
        with self.lock:
            return [report for sent_uid, report in self.sent if sent_uid == uid]

    def starts(self, uid):
        with self.lock:
            return self.start_counts.get(uid, 0)

    def process(self, uid):
        with self.lock:
            return self.started.get(uid)

    # ---- MQTT ----------------------------------------------------------------------------------
    def _subscribe(self, topic):
        # As the Go agent, wait for the SUBACK before going on.
        result, mid = self.client.subscribe(topic, qos=1)
        assert result == mqtt.MQTT_ERR_SUCCESS, result
        deadline = time.monotonic() + 10
        with self.acked_changed:
            while mid not in self.acked:
                assert self.acked_changed.wait(max(0.0, deadline - time.monotonic())), f"no SUBACK for {topic}"

    def _on_subscribe(self, client, userdata, mid, granted_qos):
        with self.acked_changed:
            self.acked.add(mid)
            self.acked_changed.notify_all()

    def _publish(self, topic, message):
        self.client.publish(topic, json.dumps(message), qos=1).wait_for_publish(10)

    def _on_message(self, client, userdata, message):
        payload = json.loads(message.payload)
        if message.topic.endswith("/response"):
            self.responses.append(payload)
            self.response.set()
            return
        # Paho runs this on its network thread; the Go agent handles each message on its own goroutine.
        threading.Thread(target=self._on_dispatch, args=(payload,), daemon=True).start()

    def _report(self, uid, state, message, event="", exit_code=0):
        report = {"taskUid": uid, "robotName": self.robot_id, "state": state, "exitCode": exit_code,
                  "message": message, "event": event, "updatedAt": go_now()}
        with self.lock:
            self.sent.append((uid, report))
        self._publish(f"k8s4r/robots/{self.robot_id}/tasks/{uid}/status", report)

    # ---- tasks -----------------------------------------------------------------------------------
    def _on_dispatch(self, message):
        task = message.get("task") or {}
        uid = task.get("metadata", {}).get("uid", "")
        if message.get("action") == "delete":
            with self.lock:
                process = self.tasks.pop(uid, None)
            if process:
                self._kill(process)  # and no report: the Go agent sends none
            return
        with self.lock:
            if uid in self.tasks:
                return  # "task already exists": only while it holds the task; a finished one would run again
        execution = task["spec"]["config"]["execConfig"]
        process = subprocess.Popen([execution["command"], *execution.get("args", [])], start_new_session=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with self.lock:
            self.tasks[uid] = process
            self.started[uid] = process
            self.start_counts[uid] = self.start_counts.get(uid, 0) + 1
            self.processes.append(process)
        self._report(uid, "running", "task started", "Started")
        threading.Thread(target=self._driver_events_after_exit, args=(uid, process), daemon=True).start()

    def _driver_events_after_exit(self, uid, process):
        # The driver's callback knows the process ended before the monitor does, and still says "running".
        process.wait()
        self._report(uid, "running", f"task exited with code {process.returncode}", "Terminated")

    def _monitor(self):
        while not self.stopping.wait(self.monitor_every):
            with self.lock:
                held = list(self.tasks.items())
            for uid, process in held:
                code = process.poll()
                if code is None:
                    self._report(uid, "running", "Task is running")
                    continue
                with self.lock:
                    self.tasks.pop(uid, None)
                self._report(uid, "exited", "Task completed successfully" if code == 0 else
                             f"Task failed with exit code {code}", exit_code=code)
                # One more driver event arrives late, out of order.
                self._report(uid, "running", "driver cleaned up", "Cleanup")

    def _heartbeats(self):
        while not self.stopping.wait(self.heartbeat_every):
            self._publish("k8s4r/heartbeat", {"robotId": self.robot_id, "token": self.token,
                                              "deviceInfo": device_info(self.robot_id), "runningTasks": None})

    @staticmethod
    def _kill(process):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        except ProcessLookupError:
            process.wait(5)
