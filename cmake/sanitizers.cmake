# aicloud_sanitizers: ASan+UBSan when AICLOUD_SANITIZE is on, empty otherwise.
add_library(aicloud_sanitizers INTERFACE)
if(AICLOUD_SANITIZE)
  target_compile_options(aicloud_sanitizers INTERFACE
    -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(aicloud_sanitizers INTERFACE -fsanitize=address,undefined)
endif()
