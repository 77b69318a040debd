# SPDX-License-Identifier: Apache-2.0
#
# ctest api_exported_symbols: the dynamic symbols libkvmesh.so defines must be exactly the
# functions include/kvmesh.h declares (every kvmesh_* name followed by "(" outside comments).
# A symbol the header does not declare means an internal function leaked (a missing
# -fvisibility=hidden, an internal accessor made public); a declared function that is not
# exported means a definition lost KVMESH_EXTERN (its file does not include kvmesh.h).
#
#   cmake -DNM=nm -DLIB=libkvmesh.so -DHEADER=include/kvmesh.h -P exported_symbols.cmake
cmake_minimum_required(VERSION 3.18)
foreach(v NM LIB HEADER)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "exported_symbols.cmake: -D${v}=... is required")
  endif()
endforeach()

execute_process(COMMAND ${NM} -D --defined-only ${LIB}
  OUTPUT_VARIABLE nm_out ERROR_VARIABLE nm_err RESULT_VARIABLE nm_rc)
if(NOT nm_rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIB} failed (${nm_rc}): ${nm_err}")
endif()

# Names the linker or an instrumentation runtime defines in every shared object.
set(linker_names _init _fini _edata _end __bss_start)
set(instrumentation_re "^(__asan|__ubsan|__tsan|__sanitizer|__odr_asan|__gcov|__llvm)")

set(exported "")
string(REPLACE "\n" ";" nm_lines "${nm_out}")
foreach(line IN LISTS nm_lines)
  if(line MATCHES "^[0-9a-fA-F]* *[A-Za-z] ([^ @]+)")
    set(name ${CMAKE_MATCH_1})
    if(name IN_LIST linker_names OR name MATCHES "${instrumentation_re}")
      continue()
    endif()
    list(APPEND exported ${name})
  endif()
endforeach()
list(REMOVE_DUPLICATES exported)

file(READ ${HEADER} hdr)
string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" hdr "${hdr}") # block comments
string(REGEX REPLACE "//[^\n]*" "" hdr "${hdr}")                  # line comments
string(REGEX MATCHALL "kvmesh_[a-z0-9_]+[ \t\r\n]*\\(" decl_raw "${hdr}")
set(declared "")
foreach(d IN LISTS decl_raw)
  string(REGEX REPLACE "[ \t\r\n]*\\($" "" d "${d}")
  list(APPEND declared ${d})
endforeach()
list(REMOVE_DUPLICATES declared)
list(LENGTH declared n_declared)
if(n_declared LESS 10)
  message(FATAL_ERROR "found only ${n_declared} function declarations in ${HEADER}: parser broken")
endif()

set(undeclared "")
foreach(s IN LISTS exported)
  if(NOT s IN_LIST declared)
    list(APPEND undeclared ${s})
  endif()
endforeach()
set(missing "")
foreach(d IN LISTS declared)
  if(NOT d IN_LIST exported)
    list(APPEND missing ${d})
  endif()
endforeach()

list(LENGTH exported n_exported)
message(STATUS "${LIB}: ${n_exported} exported symbols, ${n_declared} functions in ${HEADER}")
set(fail FALSE)
if(undeclared)
  list(JOIN undeclared "\n  " u)
  message(SEND_ERROR "exported but not declared in include/kvmesh.h:\n  ${u}")
  set(fail TRUE)
endif()
if(missing)
  list(JOIN missing "\n  " m)
  message(SEND_ERROR "declared in include/kvmesh.h but not exported (KVMESH_EXTERN?):\n  ${m}")
  set(fail TRUE)
endif()
if(fail)
  message(FATAL_ERROR "the exported symbol surface differs from include/kvmesh.h")
endif()
message(STATUS "exported symbols match include/kvmesh.h")
