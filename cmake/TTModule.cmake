# tt_add_plugin(<name> SOURCES ...) / tt_add_model(<name> SOURCES ...)
#
# Builds a plugin or model as a MODULE library named tt_<kind>_<name>.so with hidden
# visibility (only the TT_MODULE entry point is exported), linked to tt::core, placed
# in lib/tt/ of the build tree (where tt-run looks) and installed to lib/tt/.
function(_tt_add_module kind name)
  cmake_parse_arguments(ARG "NO_INSTALL" "" "SOURCES;LIBRARIES" ${ARGN})
  set(target tt_${kind}_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE tt::core ${ARG_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    OUTPUT_NAME tt_${kind}_${name}
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${TT_MODULE_OUTPUT_DIRECTORY}
    INSTALL_RPATH "$ORIGIN/..")
  if(COMMAND tt_use_pch)
    tt_use_pch(${target})
  endif()
  if(NOT ARG_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION ${TT_MODULE_INSTALL_DIR})
  endif()
endfunction()

function(tt_add_plugin name)
  _tt_add_module(plugin ${name} ${ARGN})
endfunction()

function(tt_add_model name)
  _tt_add_module(model ${name} ${ARGN})
endfunction()
