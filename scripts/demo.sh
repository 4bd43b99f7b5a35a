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
  # Over TLS, with its admin's token in the kubeconfig (kubectl sends a token only over TLS): kubectl k8s4r logs
  # shows that token to the bridge, which asks the API who holds it and whether they may read a task's log.
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/kube-sim.key" -out "$WORK/kube-sim.crt" -days 1 \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null
  "$BIN/k8s4r-kube-sim" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/kubeconfig" \
    --tls-cert "$WORK/kube-sim.crt" --tls-key "$WORK/kube-sim.key" --tls-ca "$WORK/kube-sim.crt" \
    --token "$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')" >"$WORK/kube-sim.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do [[ -s $WORK/kubeconfig ]] && break; sleep 0.05; done
  [[ -s $WORK/kubeconfig ]] || { log "k8s4r-kube-sim did not start:"; cat "$WORK/kube-sim.log" >&2; exit 1; }
  log "k8s4r-kube-sim serving $(awk '/server:/ {print $2}' "$WORK/kubeconfig") (kubeconfig: $WORK/kubeconfig)"
  command -v kubectl >/dev/null || { log "kubectl is not installed; it is needed to talk to the API"; exit 1; }
  log "kubectl apply -f proto-schemas/crds/"
  "${KUBECTL[@]}" apply -f "$REPO_ROOT/proto-schemas/crds/"
  log "kubectl apply -f examples/robot.yaml (a robot declared ahead of its agent, with its labels)"
  "${KUBECTL[@]}" apply -f "$REPO_ROOT/examples/robot.yaml"
fi

# ---- the k8s4r components -----------------------------------------------------
BRIDGE_METRICS_PORT=$(free_port)
LOGS_PORT=$(free_port)
"$BIN/k8s4r-bridge" --broker-url "tcp://127.0.0.1:$MQTT_PORT" --kubeconfig "$WORK/kubeconfig" \
  --metrics-bind-address "127.0.0.1:$BRIDGE_METRICS_PORT" --heartbeat-write-interval 10s \
  --logs-bind-address "127.0.0.1:$LOGS_PORT" >"$WORK/bridge.log" 2>&1 &
PIDS+=($!)
log "k8s4r-bridge started (metrics: curl http://127.0.0.1:$BRIDGE_METRICS_PORT/metrics)"
for _ in $(seq 200); do
  curl -fs "http://127.0.0.1:$BRIDGE_METRICS_PORT/readyz" >/dev/null 2>&1 && break
  sleep 0.05
done
curl -fs "http://127.0.0.1:$BRIDGE_METRICS_PORT/readyz" >/dev/null || { log "the bridge is not ready; its log:"; cat "$WORK/bridge.log" >&2; exit 1; }

MANAGER_METRICS_PORT=$(free_port)
"$BIN/k8s4r-manager" --kubeconfig "$WORK/kubeconfig" --namespace default \
  --metrics-bind-address "127.0.0.1:$MANAGER_METRICS_PORT" >"$WORK/manager.log" 2>&1 &
PIDS+=($!)
log "k8s4r-manager started (metrics: curl http://127.0.0.1:$MANAGER_METRICS_PORT/metrics); it approves a robot"
log "  only by the token in its Secret k8s4r-robot-<id> (the default; docs/security.md)"

# Two robots: robot-001 takes its labels from examples/robot.yaml, robot-002 brings its own. Each is enrolled
# as an operator enrolls one: a token of its own, in its Secret (labelled with its id) and in a file the agent
# reads. (This demo's Mosquitto lets anyone in, which the bridge and docs/security.md warn about; a real broker
# checks each robot's login.)
for robot in robot-001 robot-002; do
  mkdir -p "$WORK/agent-$robot"
  (umask 077 && head -c 24 /dev/urandom | base64 | tr '+/' '-_' >"$WORK/agent-$robot.token")
  "${KUBECTL[@]}" create secret generic "k8s4r-robot-$robot" --from-file=token="$WORK/agent-$robot.token" >/dev/null
  "${KUBECTL[@]}" label secret "k8s4r-robot-$robot" "robot.k8s4r.io/robot-id=$robot" >/dev/null
  log "kubectl create secret generic k8s4r-robot-$robot --from-file=token=...; kubectl label secret ... robot.k8s4r.io/robot-id=$robot"
  "$BIN/k8s4r-agent" --broker-url "tcp://127.0.0.1:$MQTT_PORT" --robot-id "$robot" --token-file "$WORK/agent-$robot.token" \
    --work-dir "$WORK/agent-$robot" --heartbeat-interval 2s --labels env=dev,zone=lab-a >"$WORK/agent-$robot.log" 2>&1 &
  PIDS+=($!)
  log "k8s4r-agent started as $robot (work dir $WORK/agent-$robot)"
done
for _ in $(seq 200); do
  online=$("${KUBECTL[@]}" get rb -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' 2>/dev/null | grep -c '^Online$' || true)
  ((online == 2)) && break
  sleep 0.1
done
log "both robots registered through the bridge and approved by the manager: kubectl get rb -o wide"
"${KUBECTL[@]}" get rb -o wide
((online == 2)) || { log "the robots did not come Online; manager log:"; cat "$WORK/manager.log" >&2; exit 1; }

log "kubectl apply -f examples/job.yaml"
"${KUBECTL[@]}" apply -f "$REPO_ROOT/examples/job.yaml"
for _ in $(seq 600); do
  state=$("${KUBECTL[@]}" get rjob hello-batch -o jsonpath='{.status.state}' 2>/dev/null)
  [[ $state == completed || $state == failed ]] && break
  sleep 0.1
done
log "kubectl get rjob,rtg,rtask,rb"
"${KUBECTL[@]}" get rjob,rtg,rtask,rb
first=$("${KUBECTL[@]}" get rtask -l job=hello-batch -o jsonpath='{.items[0].metadata.name}')
log "kubectl describe rtask $first (the Events tell what the manager decided and what happened on the robot)"
"${KUBECTL[@]}" describe rtask "$first" | sed -n '/^Status:/,$p'
log "its output: kubectl get rtask $first -o jsonpath='{.status.logs}'"
"${KUBECTL[@]}" get rtask "$first" -o jsonpath='{.status.logs}'
log "and from its robot, as it wrote it: kubectl k8s4r logs $first (docs/logs.md)"
K8S4R_LOGS_URL="http://127.0.0.1:$LOGS_PORT" "$REPO_ROOT/tools/kubectl-k8s4r" logs "$first" --kubeconfig "$WORK/kubeconfig" ||
  log "kubectl k8s4r logs failed; the bridge's log: $WORK/bridge.log"
log "MQTT traffic, as mosquitto_sub showed it:"
cut -c1-200 "$WORK/mqtt.log" >&2
[[ $state == completed ]] || { log "the job did not complete ($state); manager and bridge logs:"; cat "$WORK/manager.log" "$WORK/bridge.log" >&2; exit 1; }
log "the job completed. Where to look on a real system:"
log "  kubectl get rjob,rtg,rtask,rb          what was asked, decided and done"
log "  kubectl describe rtask <name>          the Events of one task"
log "  kubectl k8s4r logs -f <name>           what a task prints, live, from its robot"
log "  mosquitto_sub -v -t 'k8s4r/#'          every message between robots and the bridge"
log "  curl <manager>/metrics, <bridge>/metrics"
