// Placeholder written by the build setup; the lead replaces it.
#include <spindle/spindle.hpp>

namespace spindle {

const char* version_string() noexcept { return "0.1.0"; }

}  // namespace spindle
