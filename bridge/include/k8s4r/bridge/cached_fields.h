// What the bridge keeps of each Robot and Task in its informers' caches: the
// metadata it reads (identity, resourceVersion, generation, deletion and
// finalizers), spec and status. Labels, annotations (kubectl's
// last-applied-configuration is a second copy of the object), owner
// references and managedFields are dropped: at 10,000 Tasks they are most of
// the cache.
#pragma once

#include <nlohmann/json.hpp>

namespace k8s4r::bridge {

void keep_cached_fields(nlohmann::json& object);

// A Robot keeps less again: of its spec, the labels (whether an operator set
// any); of its status, what registration, heartbeats and presence read and
// rewrite (phase, message, connected, conditions, runningTasks,
// lastHeartbeatTime), with status.deviceInfo turned into its capacity_text,
// the one thing a heartbeat is compared with. Parsed JSON costs about six
// bytes per byte, and device usage figures, the agent's version and the token
// digest were most of each of 10,000 cached Robots.
void keep_cached_robot_fields(nlohmann::json& robot);

}  // namespace k8s4r::bridge
