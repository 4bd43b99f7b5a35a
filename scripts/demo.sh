#!/usr/bin/env bash
# Runs k8s4r's main job on this machine: a Mosquitto broker on a free loopback
# port, the Kubernetes API stand-in (k8s4r-kube-sim), the bridge, the manager
# and agents, then submits examples/job.yaml and shows it running and finishing.
#
# Components that are not built yet are named and skipped; no step is faked.
# Everything it starts is stopped when it ends (or on Ctrl-C).
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO_ROOT/scripts/lib/common.sh"
cd "$REPO_ROOT"

ensure_packages
configure_and_build "$REPO_ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
BIN="$REPO_ROOT/build/bin"

WORK=$(mktemp -d /tmp/k8s4r-demo.XXXXXX)
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_for_port() {  # wait_for_port PORT NAME
  local deadline=$((SECONDS + 10))
  until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
    ((SECONDS < deadline)) || { log "$2 did not start; its log:"; cat "$WORK/$2.log" >&2; exit 1; }
    sleep 0.1
  done
}

# ---- MQTT broker, and what an operator would tail ---------------------------
MQTT_PORT=$(free_port)
cat >"$WORK/mosquitto.conf" <<CONF
listener $MQTT_PORT 127.0.0.1
allow_anonymous true
persistence false
set_tcp_nodelay true
max_queued_messages 100000
CONF
mosquitto -c "$WORK/mosquitto.conf" >"$WORK/mosquitto.log" 2>&1 &
PIDS+=($!)
wait_for_port "$MQTT_PORT" mosquitto
log "Mosquitto listening on 127.0.0.1:$MQTT_PORT"

mosquitto_sub -h 127.0.0.1 -p "$MQTT_PORT" -v -t 'k8s4r/#' >"$WORK/mqtt.log" 2>&1 &
PIDS+=($!)
log "tailing MQTT as an operator would: mosquitto_sub -h 127.0.0.1 -p $MQTT_PORT -v -t 'k8s4r/#'"

# ---- Kubernetes API (the stand-in), with the CRDs --------------------------------
KUBECTL=(kubectl --kubeconfig "$WORK/kubeconfig" --cache-dir "$WORK/kube-cache")
if [[ -x $BIN/k8s4r-kube-sim ]]; then
  "$BIN/k8s4r-kube-sim" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/kubeconfig" >"$WORK/kube-sim.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do [[ -s $WORK/kubeconfig ]] && break; sleep 0.05; done
  [[ -s $WORK/kubeconfig ]] || { log "k8s4r-kube-sim did not start:"; cat "$WORK/kube-sim.log" >&2; exit 1; }
  log "k8s4r-kube-sim serving $(awk '/server:/ {print $2}' "$WORK/kubeconfig") (kubeconfig: $WORK/kubeconfig)"
  command -v kubectl >/dev/null || { log "kubectl is not installed; it is needed to talk to the API"; exit 1; }
  log "kubectl apply -f proto-schemas/crds/"
  "${KUBECTL[@]}" apply -f "$REPO_ROOT/proto-schemas/crds/"
  log "kubectl apply -f examples/robot.yaml -f examples/job.yaml"
  "${KUBECTL[@]}" apply -f "$REPO_ROOT/examples/robot.yaml" -f "$REPO_ROOT/examples/job.yaml"
  log "kubectl get rb,rjob,rtg,rtask"
  "${KUBECTL[@]}" get rb,rjob,rtg,rtask
fi

# ---- the k8s4r components -----------------------------------------------------
BRIDGE_METRICS_PORT=$(free_port)
"$BIN/k8s4r-bridge" --broker-url "tcp://127.0.0.1:$MQTT_PORT" --kubeconfig "$WORK/kubeconfig" \
  --metrics-bind-address "127.0.0.1:$BRIDGE_METRICS_PORT" --heartbeat-write-interval 10s >"$WORK/bridge.log" 2>&1 &
PIDS+=($!)
log "k8s4r-bridge started (metrics: curl http://127.0.0.1:$BRIDGE_METRICS_PORT/metrics)"
for _ in $(seq 200); do
  curl -fs "http://127.0.0.1:$BRIDGE_METRICS_PORT/readyz" >/dev/null 2>&1 && break
  sleep 0.05
done
curl -fs "http://127.0.0.1:$BRIDGE_METRICS_PORT/readyz" >/dev/null || { log "the bridge is not ready; its log:"; cat "$WORK/bridge.log" >&2; exit 1; }

"$BIN/k8s4r-agent" --broker-url "tcp://127.0.0.1:$MQTT_PORT" --robot-id robot-001 --token demo-token-robot-001 \
  --work-dir "$WORK/agent" --heartbeat-interval 2s --labels zone=lab-a >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
log "k8s4r-agent started as robot-001 (work dir $WORK/agent)"
for _ in $(seq 100); do
  [[ -n $("${KUBECTL[@]}" get rb robot-001 -o jsonpath='{.status.agentVersion}' 2>/dev/null) ]] && break
  sleep 0.1
done
log "robot-001 registered through the bridge: kubectl get rb -o wide"
"${KUBECTL[@]}" get rb -o wide

if [[ ! -x $BIN/k8s4r-manager ]]; then
  log "k8s4r-manager is not built yet (issue 11): nothing turns the Job into Tasks or places them"
  log "so, as the manager will, a Task is placed by hand: examples/task.yaml, then status.state=dispatching"
  "${KUBECTL[@]}" apply -f "$REPO_ROOT/examples/task.yaml"
  "${KUBECTL[@]}" patch rtask hello --subresource=status --type=merge -p '{"status":{"state":"dispatching"}}'
  for _ in $(seq 300); do
    state=$("${KUBECTL[@]}" get rtask hello -o jsonpath='{.status.state}')
    [[ $state == completed || $state == failed ]] && break
    sleep 0.1
  done
  log "kubectl get rtask hello"
  "${KUBECTL[@]}" get rtask hello
  log "kubectl describe rtask hello (the Events tell what happened on the robot)"
  "${KUBECTL[@]}" describe rtask hello | sed -n '/^Status:/,$p'
  log "its output: kubectl get rtask hello -o jsonpath='{.status.logs}'"
  "${KUBECTL[@]}" get rtask hello -o jsonpath='{.status.logs}'
  log "MQTT traffic, as mosquitto_sub showed it:"
  cut -c1-200 "$WORK/mqtt.log" >&2
  [[ $state == completed ]] || { log "the task did not complete; bridge log:"; cat "$WORK/bridge.log" >&2; exit 1; }
  exit 0
fi
