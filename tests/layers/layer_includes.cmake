# SPDX-License-Identifier: Apache-2.0
#
# ctest layer_includes: the include rules of docs/architecture.md "Layers", checked on the
# source text (the kvmesh_layercheck_* link checks enforce the same rule on symbols):
#   - a file in src/<layer>/ includes headers of its own layer and the layers below only;
#   - no file anywhere (src, tests, tools, bench) includes another folder's *_impl.h;
#   - a tool (tools/*/) includes only "kvmesh.h", "api/kvmesh_tools.h" and its own headers.
#
#   cmake -DROOT=<source dir> "-DLAYERS=core;env;..." -P layer_includes.cmake
cmake_minimum_required(VERSION 3.18)
foreach(v ROOT LAYERS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "layer_includes.cmake: -D${v}=... is required")
  endif()
endforeach()

set(problems "")

function(includes_of file out)
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  set(r "")
  foreach(l IN LISTS lines)
    if(l MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
      list(APPEND r ${CMAKE_MATCH_1})
    endif()
  endforeach()
  set(${out} "${r}" PARENT_SCOPE)
endfunction()

# 1. src/<layer> -> only same or lower layers
list(LENGTH LAYERS n_layers)
foreach(layer IN LISTS LAYERS)
  list(FIND LAYERS ${layer} my_rank)
  file(GLOB files ${ROOT}/src/${layer}/*.c ${ROOT}/src/${layer}/*.h)
  foreach(f IN LISTS files)
    includes_of(${f} incs)
    foreach(i IN LISTS incs)
      if(i MATCHES "^([a-z_]+)/")
        list(FIND LAYERS ${CMAKE_MATCH_1} rank)
        if(rank GREATER my_rank)
          file(RELATIVE_PATH rel ${ROOT} ${f})
          list(APPEND problems "${rel}: includes \"${i}\" of the higher layer ${CMAKE_MATCH_1}")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()

# 2. nobody includes another folder's *_impl.h
file(GLOB_RECURSE all_files ${ROOT}/src/*.[ch] ${ROOT}/tests/*.[ch] ${ROOT}/tools/*.[ch]
  ${ROOT}/bench/*.[ch])
foreach(f IN LISTS all_files)
  get_filename_component(dir ${f} DIRECTORY)
  get_filename_component(folder ${dir} NAME)
  includes_of(${f} incs)
  foreach(i IN LISTS incs)
    if(i MATCHES "_impl\\.h$")
      if(i MATCHES "^([a-z_]+)/")
        set(owner ${CMAKE_MATCH_1})
      else()
        set(owner ${folder})
      endif()
      if(NOT owner STREQUAL folder)
        file(RELATIVE_PATH rel ${ROOT} ${f})
        list(APPEND problems "${rel}: includes \"${i}\", private to src/${owner}")
      endif()
    endif()
  endforeach()
endforeach()

# 3. tools: the public header, the tools header, their own headers
file(GLOB_RECURSE tool_files ${ROOT}/tools/*.[ch])
foreach(f IN LISTS tool_files)
  includes_of(${f} incs)
  foreach(i IN LISTS incs)
    if(NOT i STREQUAL "kvmesh.h" AND NOT i STREQUAL "api/kvmesh_tools.h" AND i MATCHES "/")
      file(RELATIVE_PATH rel ${ROOT} ${f})
      list(APPEND problems "${rel}: includes \"${i}\" (tools use kvmesh.h and api/kvmesh_tools.h)")
    endif()
  endforeach()
endforeach()

if(problems)
  list(JOIN problems "\n  " p)
  message(FATAL_ERROR "layer include rules broken:\n  ${p}")
endif()
message(STATUS "layer include rules hold (${n_layers} layers)")
