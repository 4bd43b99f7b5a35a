// The resources tests talk about, named once.
#pragma once

#include "k8s4r/kube/client.h"

namespace k8s4r::testing {

inline const kube::Resource kTaskResource{"robot.k8s4r.io", "v1alpha1", "tasks", true};

}  // namespace k8s4r::testing
