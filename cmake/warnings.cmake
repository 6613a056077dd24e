# aicloud_warnings: an INTERFACE target every project target links privately.
add_library(aicloud_warnings INTERFACE)
target_compile_options(aicloud_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Woverloaded-virtual
  -Wimplicit-fallthrough -Wno-missing-field-initializers)
option(AICLOUD_WERROR "Treat warnings as errors" OFF)
if(AICLOUD_WERROR)
  target_compile_options(aicloud_warnings INTERFACE -Werror)
endif()
