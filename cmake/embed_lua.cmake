# Writes OUT, a header with each Lua script of DIR named in SCRIPTS (comma-separated) as a string constant
# in namespace NAMESPACE, the files of COMMON (comma-separated paths) prepended to each, as Redis runs every
# script on its own. Run with cmake -P.
#   kAcquireLua for acquire.lua, kForceReleaseLua for force_release.lua, ...
# Whole-line comments are left out (their line kept empty, so the server's error line numbers
# still match): Redis refuses a bulk over 16 KB from a connection that has not authenticated
# (CVE-2021-32675) by closing it, and a client without a password loads the scripts first, so
# a script over that limit would hide the server's NOAUTH behind a reset connection.
function(strip_comments out text)
  string(REGEX REPLACE "^[ \t]*--[^\n]*" "" text "${text}")
  string(REGEX REPLACE "\n[ \t]*--[^\n]*" "\n" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
set(common "")
string(REPLACE "," ";" common_files "${COMMON}")
foreach(file IN LISTS common_files)
  file(READ "${file}" part)
  strip_comments(part "${part}")
  string(APPEND common "${part}")
endforeach()
set(text "// Generated from ${DIR} by cmake/embed_lua.cmake: do not edit.\n#pragma once\n\n#include <string_view>\n\nnamespace ${NAMESPACE} {\n")
string(REPLACE "," ";" names "${SCRIPTS}")
foreach(name IN LISTS names)
  file(READ "${DIR}/${name}.lua" body)
  strip_comments(body "${body}")
  string(REPLACE "_" ";" words "${name}")
  set(camel "")
  foreach(word IN LISTS words)
    string(SUBSTRING "${word}" 0 1 first)
    string(TOUPPER "${first}" first)
    string(SUBSTRING "${word}" 1 -1 rest)
    string(APPEND camel "${first}${rest}")
  endforeach()
  string(APPEND text "\ninline constexpr std::string_view k${camel}Lua = R\"dlocklua(${common}\n-- ${name}.lua\n${body})dlocklua\";\n")
endforeach()
string(APPEND text "\n}  // namespace ${NAMESPACE}\n")
file(WRITE "${OUT}.tmp" "${text}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
