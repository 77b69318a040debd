# SPDX-License-Identifier: Apache-2.0
#
# Generates src/obs/status_page.c (the status page as a C string) from src/obs/status_page.html.
#   cmake -P src/obs/status_page_gen.cmake               rewrite status_page.c
#   cmake -DCHECK=ON -P src/obs/status_page_gen.cmake    fail when status_page.c is out of date
# (ctest ops_status_page_source runs the check.)
cmake_minimum_required(VERSION 3.18)
get_filename_component(dir ${CMAKE_CURRENT_LIST_FILE} DIRECTORY)
file(READ ${dir}/status_page.html html)
# One C string literal per line of the file; semicolons stay (the text is never used as a list).
string(REPLACE "\\" "\\\\" html "${html}")
string(REPLACE "\"" "\\\"" html "${html}")
string(REGEX REPLACE "\n$" "" html "${html}")
string(REPLACE "\n" "\\n\"\n    \"" html "${html}")
set(body "    \"${html}\\n\"")
set(c "/* SPDX-License-Identifier: Apache-2.0 */
/*
 * status_page.c — GENERATED from status_page.html by status_page_gen.cmake; edit the .html and
 * run `cmake -P src/obs/status_page_gen.cmake`. Owns the bytes of the status page (status_page.h).
 */
#include \"obs/status_page.h\"

#include <string.h>

bool obs_status_page_wanted(const char *method, const char *uri, const char *accept)
{
    if (strcmp(method, \"GET\") != 0 && strcmp(method, \"HEAD\") != 0)
        return false;
    return strcmp(uri, \"/\") == 0 && accept && strstr(accept, \"text/html\") != NULL;
}

// clang-format off
const char obs_status_page_html[] =
${body}
;
// clang-format on

const size_t obs_status_page_len = sizeof(obs_status_page_html) - 1;
")
if(CHECK)
  file(READ ${dir}/status_page.c have)
  if(NOT have STREQUAL c)
    message(FATAL_ERROR "src/obs/status_page.c is out of date: run cmake -P src/obs/status_page_gen.cmake")
  endif()
  message(STATUS "status_page.c matches status_page.html")
else()
  file(WRITE ${dir}/status_page.c "${c}")
endif()
