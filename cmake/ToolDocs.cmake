# dlock(1) and the bash completion, made at build time by the dlock just built: the man page by
# help2man from `dlock --help` and each subcommand's --help (cmake/man_page.cmake), the
# completion by `dlock completion bash`.
set(dlock_completion ${PROJECT_BINARY_DIR}/share/bash-completion/completions/dlock)
add_custom_command(OUTPUT ${dlock_completion}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/share/bash-completion/completions
  COMMAND $<TARGET_FILE:dlock_cli> completion bash > ${dlock_completion}
  DEPENDS dlock_cli COMMENT "Generating dlock's bash completion")
set(dlock_docs ${dlock_completion})

find_program(HELP2MAN_EXECUTABLE help2man)
if(HELP2MAN_EXECUTABLE)
  set(dlock_man ${PROJECT_BINARY_DIR}/share/man/man1/dlock.1.gz)
  add_custom_command(OUTPUT ${dlock_man}
    COMMAND ${CMAKE_COMMAND} -DDLOCK=$<TARGET_FILE:dlock_cli> -DHELP2MAN=${HELP2MAN_EXECUTABLE}
      -DVERSION=${PROJECT_VERSION} -DOUT=${dlock_man} -DWITHOUT=$<$<NOT:$<BOOL:${DLOCK_BUILD_SERVE}>>:serve> -P ${PROJECT_SOURCE_DIR}/cmake/man_page.cmake
    DEPENDS dlock_cli $<$<BOOL:${DLOCK_BUILD_SERVE}>:dlock_serve> ${PROJECT_SOURCE_DIR}/cmake/man_page.cmake
    COMMENT "Generating dlock(1) with help2man" VERBATIM)
  list(APPEND dlock_docs ${dlock_man})
else()
  message(STATUS "help2man not found: no dlock(1) man page (Debian: help2man)")
endif()
add_custom_target(dlock_docs ALL DEPENDS ${dlock_docs})
