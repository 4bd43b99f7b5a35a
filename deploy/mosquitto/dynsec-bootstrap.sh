#!/usr/bin/env bash
# Prepares Mosquitto's dynamic-security plugin for k8s4r-bridge --dynamic-security
# (docs/security.md): nothing allowed by default, a role and a login for the
# bridge, and a read-only role and login for operators. The bridge then makes
# one login per robot from the robots' Secrets.
#
#   deploy/mosquitto/dynsec-bootstrap.sh BRIDGE_PASSWORD_FILE OPERATOR_PASSWORD_FILE -- MOSQUITTO_CTRL_OPTIONS...
#
# MOSQUITTO_CTRL_OPTIONS connect as the plugin's admin (made by
# `mosquitto_ctrl dynsec init`), e.g. -h broker.lab -p 8883 --cafile ca.crt -u admin -P "$ADMIN_PASSWORD".
# Run it on the broker's host: mosquitto_ctrl takes passwords as arguments,
# so they are in that host's process list while it runs. Run it once; it
# stops at the first command that fails (an existing role or client).
set -euo pipefail

if [[ $# -lt 3 || $3 != "--" ]]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
bridge_password=$(<"$1")
operator_password=$(<"$2")
shift 3
ctrl() { mosquitto_ctrl "$@"; }
dynsec() { ctrl "${options[@]}" dynsec "$@" >/dev/null; }
options=("$@")

# Deny by default: every client gets only what a role gives it.
for acltype in publishClientSend publishClientReceive subscribe unsubscribe; do
  dynsec setDefaultACLAccess "$acltype" deny
done

# The bridge: it manages robot logins ($CONTROL), reads what robots send and
# sends them their answers and dispatches, and says a removed robot offline.
dynsec createRole k8s4r-bridge
for topic in '$CONTROL/dynamic-security/#'; do
  for acltype in publishClientSend publishClientReceive subscribePattern unsubscribePattern; do
    dynsec addRoleACL k8s4r-bridge "$acltype" "$topic" allow
  done
done
for topic in 'k8s4r/robots/+/register' 'k8s4r/robots/+/heartbeat' 'k8s4r/robots/+/presence' \
  'k8s4r/robots/+/tasks/+/status' 'k8s4r/robots/+/logs/chunks/+' 'k8s4r/register' 'k8s4r/heartbeat'; do
  for acltype in subscribePattern unsubscribePattern publishClientReceive; do
    dynsec addRoleACL k8s4r-bridge "$acltype" "$topic" allow
  done
done
for topic in 'k8s4r/robots/+/response' 'k8s4r/robots/+/tasks/dispatch' 'k8s4r/robots/+/acks' \
  'k8s4r/robots/+/artifacts' 'k8s4r/robots/+/presence' 'k8s4r/robots/+/logs/request'; do
  dynsec addRoleACL k8s4r-bridge publishClientSend "$topic" allow
done
dynsec createClient k8s4r-bridge -p "$bridge_password"
dynsec addClientRole k8s4r-bridge k8s4r-bridge

# Operators: mosquitto_sub -v -t 'k8s4r/#', reading only, and never a
# Register (it carries the robot's token, which is its login) nor a task's
# log (for those allowed get tasks/log, through kubectl k8s4r logs): the
# deny outranks the allow by its priority.
dynsec createRole k8s4r-operator
for topic in 'k8s4r/robots/+/register' 'k8s4r/register' 'k8s4r/robots/+/logs/chunks/+'; do
  dynsec addRoleACL k8s4r-operator publishClientReceive "$topic" deny 10
done
for acltype in subscribePattern unsubscribePattern publishClientReceive; do
  dynsec addRoleACL k8s4r-operator "$acltype" 'k8s4r/#' allow
done
dynsec createClient k8s4r-operator -p "$operator_password"
dynsec addClientRole k8s4r-operator k8s4r-operator
echo "dynamic security ready: roles and logins k8s4r-bridge and k8s4r-operator; robots get theirs from k8s4r-bridge"
