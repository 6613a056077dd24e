# Profile-guided optimization (GCC), for release builds of the serving executables; off by
# default. scripts/build-pgo drives it: configure with AICLOUD_PGO=generate, build, run a
# training workload (the instrumented programs write .gcda profiles into AICLOUD_PGO_DIR),
# reconfigure the same build directory with AICLOUD_PGO=use, build again. GCC names a profile
# after its object file's path, so both builds must use the same build directory. Code the
# training did not run is optimized as usual (-fprofile-partial-training). The flags apply to
# every target, the libraries included: that is where the request path lives.
# bench/RESULTS.md 8.15: what it does to the gateway's instructions and CPU per request.
set(AICLOUD_PGO "off" CACHE STRING "Profile-guided optimization: off, generate or use")
set_property(CACHE AICLOUD_PGO PROPERTY STRINGS off generate use)
set(AICLOUD_PGO_DIR "${CMAKE_BINARY_DIR}/pgo-profile" CACHE PATH "Where instrumented programs write profiles")
if(AICLOUD_PGO STREQUAL "generate")
  add_compile_options(-fprofile-generate -fprofile-update=atomic "-fprofile-dir=${AICLOUD_PGO_DIR}")
  add_link_options(-fprofile-generate -fprofile-update=atomic)
  message(STATUS "PGO: instrumented build; profiles go to ${AICLOUD_PGO_DIR}")
elseif(AICLOUD_PGO STREQUAL "use")
  if(NOT IS_DIRECTORY "${AICLOUD_PGO_DIR}")
    message(FATAL_ERROR "AICLOUD_PGO=use: no profiles in ${AICLOUD_PGO_DIR}; build with AICLOUD_PGO=generate and "
                        "run a training workload first (scripts/build-pgo does both)")
  endif()
  # Sources changed since the training lose their profile (a warning, not an error).
  add_compile_options(-fprofile-use -fprofile-partial-training -Wno-missing-profile -Wno-coverage-mismatch
                      "-fprofile-dir=${AICLOUD_PGO_DIR}")
  add_compile_definitions(AICLOUD_PGO_USE=1)  # gateway_bench names the build it measures
  message(STATUS "PGO: optimized with the profiles in ${AICLOUD_PGO_DIR}")
elseif(NOT AICLOUD_PGO STREQUAL "off")
  message(FATAL_ERROR "AICLOUD_PGO must be off, generate or use, not '${AICLOUD_PGO}'")
endif()
