# aicloud_allocator: the malloc of the executables that serve requests (aicloud and
# bench/gateway_bench). jemalloc by default: the request path allocates small, short-lived
# objects on one thread and frees some on another (usage records, answers), which glibc's
# allocator serves with ~8% more instructions per proxied request (bench/RESULTS.md 8.11).
# Libraries and unit tests keep the system allocator; so does a sanitizer build, whose runtime
# replaces malloc itself.
set(AICLOUD_ALLOCATOR "jemalloc" CACHE STRING "malloc of the aicloud executables: jemalloc or system")
set_property(CACHE AICLOUD_ALLOCATOR PROPERTY STRINGS jemalloc system)
add_library(aicloud_allocator INTERFACE)
if(AICLOUD_ALLOCATOR STREQUAL "jemalloc" AND NOT AICLOUD_SANITIZE)
  find_library(AICLOUD_JEMALLOC_LIBRARY NAMES jemalloc)
  if(NOT AICLOUD_JEMALLOC_LIBRARY)
    message(FATAL_ERROR "jemalloc not found: install it with scripts/setup (Debian's libjemalloc-dev), "
                        "or configure with -DAICLOUD_ALLOCATOR=system")
  endif()
  target_link_libraries(aicloud_allocator INTERFACE ${AICLOUD_JEMALLOC_LIBRARY})
  message(STATUS "aicloud executables use jemalloc: ${AICLOUD_JEMALLOC_LIBRARY}")
elseif(NOT AICLOUD_ALLOCATOR MATCHES "^(jemalloc|system)$")
  message(FATAL_ERROR "AICLOUD_ALLOCATOR must be jemalloc or system, not '${AICLOUD_ALLOCATOR}'")
endif()
