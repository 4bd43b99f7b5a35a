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

}  // namespace k8s4r::bridge
