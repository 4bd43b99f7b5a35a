// Kubernetes resource quantities ("100m", "0.5", "128Mi", "1e3"), as a
// Task's `resources` (cpu, memory) spell them: the grammar of
// k8s.io/apimachinery's resource.Quantity, read into whole milli-units,
// rounded up as Quantity.MilliValue() rounds.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"

#include <cstdint>
#include <string_view>

namespace k8s4r::crd {

// `text` in thousandths of its unit: "100m" is 100, "0.5" 500, "1Ki" 1,024,000.
// Refused: anything the grammar does not allow, a negative quantity, and one
// whose milli-units do not fit in 63 bits (more than about 9.2e15 units).
Result<std::int64_t> parse_quantity_milli(std::string_view text);

// The quantity in whole units, rounded up ("1.5" is 2, "100m" is 1).
inline std::int64_t whole_units(std::int64_t milli) { return milli / 1000 + (milli % 1000 != 0 ? 1 : 0); }

}  // namespace k8s4r::crd
