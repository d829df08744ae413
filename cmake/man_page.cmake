# cmake -DDLOCK=path/to/dlock -DHELP2MAN=help2man -DVERSION=x.y.z -DOUT=dlock.1.gz [-DWITHOUT=serve]
#   -P man_page.cmake
# dlock(1) from the tool's own help: help2man formats `dlock --help`, and a COMMANDS section
# gives each subcommand's --help verbatim, found by walking the "Subcommands:" lists of the
# help texts (so a new subcommand is documented without touching this file).

function(help_of out)
  execute_process(COMMAND ${DLOCK} ${ARGN} --help OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "dlock ${ARGN} --help failed (${rc})")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# The subcommand names a help text lists: the first word of each indented line after a
# "Subcommands:" heading (CLI11's layout), up to the next unindented line.
function(subcommands_of text out)
  string(REPLACE ";" "\\;" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(names)
  set(inside OFF)
  foreach(line IN LISTS lines)
    if(line MATCHES "^[Ss][Uu][Bb][Cc][Oo][Mm][Mm][Aa][Nn][Dd][Ss]:")
      set(inside ON)
    elseif(inside AND line MATCHES "^  +([a-z][a-z0-9-]*)")
      list(APPEND names ${CMAKE_MATCH_1})
    elseif(inside AND NOT line MATCHES "^ ")
      set(inside OFF)
    endif()
  endforeach()
  set(${out} ${names} PARENT_SCOPE)
endfunction()

# roff, verbatim: backslashes escaped, lines that start with . or ' made plain text.
function(roff_verbatim text out)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

help_of(top)
subcommands_of("${top}" pending)
list(REMOVE_ITEM pending ${WITHOUT})  # `serve` runs dlock-serve, when it is built
if(NOT pending)
  message(FATAL_ERROR "no subcommands found in `dlock --help`")
endif()
set(section "[COMMANDS]\nEach command's own --help:\n")
while(pending)
  list(POP_FRONT pending command)
  string(REPLACE " " ";" words "${command}")
  help_of(text ${words})
  roff_verbatim("${text}" escaped)
  string(APPEND section ".SS \"dlock ${command}\"\n.nf\n${escaped}.fi\n")
  subcommands_of("${text}" nested)
  foreach(sub IN LISTS nested)
    list(APPEND pending "${command} ${sub}")
  endforeach()
endwhile()

get_filename_component(dir ${OUT} DIRECTORY)
string(REGEX REPLACE "\\.gz$" "" page ${OUT})
file(WRITE ${dir}/commands.h2m "${section}")
execute_process(COMMAND ${HELP2MAN} --no-info --no-discard-stderr --version-string=${VERSION}
    "--name=distributed locks from the shell, in the manner of flock(1)" --section=1
    --include=${dir}/commands.h2m --output=${page} ${DLOCK}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "help2man failed (${rc})")
endif()
execute_process(COMMAND gzip -9nf ${page} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip ${page} failed (${rc})")
endif()
