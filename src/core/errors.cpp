// The shared error helpers (spindle/core/errors.hpp).
#include "spindle/core/errors.hpp"

#include <cstdio>

namespace spindle {

void log_unobserved_exception(const char* where, std::exception_ptr error) noexcept {
  if (where == nullptr) where = "spindle";
  try {
    if (error) std::rethrow_exception(error);
    std::fprintf(stderr, "spindle: unobserved exception in %s: (none)\n", where);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spindle: unobserved exception in %s: %s\n", where, e.what());
  } catch (...) {
    std::fprintf(stderr, "spindle: unobserved exception in %s: (not a std::exception)\n", where);
  }
}

}  // namespace spindle
