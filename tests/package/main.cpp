// Consumer of an installed spindle (see run.cmake): built once with find_package(spindle) and
// once with `pkg-config --cflags --libs spindle`.
#include <spindle/spindle.hpp>

#include <cstdio>

int main() {
  std::printf("spindle %s\n", spindle::version_string());
  return 0;
}
