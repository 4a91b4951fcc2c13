# ctest `package_consumer`: install the build tree into a temporary prefix, then
#   1. configure + build + run tests/package with find_package(spindle) against that prefix,
#   2. compile main.cpp with `pkg-config --cflags --libs spindle` and run it.
# Invoked as: cmake -DBUILD_DIR=... -DCONSUMER_DIR=... -DWORK_DIR=... -DGENERATOR=... -DCXX=...
#                   -DPKG_CONFIG=... -DEXPECTED_VERSION=... [-DCONFIG=...] -P run.cmake
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR CONSUMER_DIR WORK_DIR GENERATOR CXX EXPECTED_VERSION)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(step)
  string(JOIN " " shown ${ARGN})
  message(STATUS "+ ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

function(expect_version exe)
  step("${exe}")
  if(NOT step_output MATCHES "${EXPECTED_VERSION}")
    message(FATAL_ERROR "${exe} printed '${step_output}', expected it to contain ${EXPECTED_VERSION}")
  endif()
  message(STATUS "${exe}: ${step_output}")
endfunction()

# 0. Install.
set(config_args "")
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
step("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" ${config_args})

# 1. find_package(spindle) + spindle::spindle.
step("${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${consumer_build}" -G "${GENERATOR}"
     "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
step("${CMAKE_COMMAND}" --build "${consumer_build}")
expect_version("${consumer_build}/consumer")
step("${consumer_build}/documented_usage")
if(NOT step_output MATCHES "documented usage: OK")
  message(FATAL_ERROR "documented_usage printed '${step_output}'")
endif()

# 2. pkg-config --cflags --libs spindle.
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config not found (Debian: pkg-config)")
endif()
file(GLOB_RECURSE pc_files "${prefix}/*/spindle.pc")
if(NOT pc_files)
  message(FATAL_ERROR "spindle.pc was not installed under ${prefix}")
endif()
list(GET pc_files 0 pc_file)
get_filename_component(pc_dir "${pc_file}" DIRECTORY)
set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
step("${PKG_CONFIG}" --cflags --libs spindle)
string(STRIP "${step_output}" pc_flags)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
step("${CXX}" -std=c++20 "${CONSUMER_DIR}/main.cpp" ${pc_flags} -o "${WORK_DIR}/consumer_pkgconfig")
expect_version("${WORK_DIR}/consumer_pkgconfig")

message(STATUS "package_consumer: OK (find_package and pkg-config)")
