# tt_add_plugin(<name> SOURCES ...) / tt_add_model(<name> SOURCES ...)
#
# Builds a plugin or model as a MODULE library named tt_<kind>_<name>.so with hidden
# visibility (only the TT_MODULE entry point is exported), linked to tt::core, placed
# in lib/tt/ of the build tree (where tt-run looks) and installed to lib/tt/.
# libstdc++ is named ahead of LibTorch, whose pip wheels export copies of some of its symbols
# (std::filesystem) that crash when tt's calls are bound to them (see tt's CMakeLists.txt, which
# also puts this flag in its link rules; empty under its sanitizers).
#
# And it is always the shared libstdc++. LibTorch's libraries need libstdc++.so.6, so it is in
# every tt process; a binary that also carries a static copy (a compiler shipped with only
# libstdc++.a links one) exports that copy's symbols to the shared libraries, and two copies of
# libstdc++ in one process crash (seen: SentencePiece's trainer writing to std::cout, under a
# GCC 13 with only libstdc++.a). So a folder of the build tree holds a libstdc++.so naming the
# compiler's shared libstdc++, or, where it has none, the libstdc++.so.6 the system loads, and is
# searched first (-L); the compiler's own -lstdc++ then finds it too.
function(_tt_shared_stdcxx_dir out)
  set(_dir "${CMAKE_BINARY_DIR}/stdcxx")
  set(_how "the compiler's")
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
    OUTPUT_VARIABLE _so OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT IS_ABSOLUTE "${_so}" OR NOT EXISTS "${_so}")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.a
      OUTPUT_VARIABLE _static OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so.6
      OUTPUT_VARIABLE _so OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT IS_ABSOLUTE "${_so}" OR NOT EXISTS "${_so}")
      find_library(_tt_stdcxx6 NAMES libstdc++.so.6 NO_CACHE)
      set(_so "${_tt_stdcxx6}")
    endif()
    if(NOT _so)
      message(FATAL_ERROR "tt: ${CMAKE_CXX_COMPILER} has no shared libstdc++ (only '${_static}') "
        "and no libstdc++.so.6 was found: install the C++ runtime (Debian: libstdc++6), or set "
        "TT_STDCXX_FIRST to the link flags that name it")
    endif()
    set(_how "the system's (${CMAKE_CXX_COMPILER} has only ${_static})")
  endif()
  get_filename_component(_so "${_so}" REALPATH)
  file(MAKE_DIRECTORY "${_dir}")
  file(CREATE_LINK "${_so}" "${_dir}/libstdc++.so" SYMBOLIC)
  message(STATUS "tt: libstdc++ linked shared: ${_so}, ${_how}")
  set(${out} "${_dir}" PARENT_SCOPE)
endfunction()
if(NOT DEFINED TT_STDCXX_FIRST)
  _tt_shared_stdcxx_dir(_tt_stdcxx_dir)
  set(TT_STDCXX_FIRST "-L${_tt_stdcxx_dir} -Wl,--push-state,--no-as-needed,-lstdc++,--pop-state")
endif()

function(_tt_add_module kind name)
  cmake_parse_arguments(ARG "NO_INSTALL" "" "SOURCES;LIBRARIES" ${ARGN})
  set(target tt_${kind}_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  separate_arguments(_stdcxx_first UNIX_COMMAND "${TT_STDCXX_FIRST}")
  target_link_libraries(${target} PRIVATE ${_stdcxx_first} tt::core ${ARG_LIBRARIES})
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

# tt_add_model_library(<name> [PUBLIC_LIBRARIES ...] [PRIVATE_LIBRARIES ...])
# tt_add_plugin_library(<name> [PUBLIC_LIBRARIES ...] [PRIVATE_LIBRARIES ...])
# A model or plugin whose sources, everything in src/ but module.cpp, form the static library
# tt_<name>_impl (PIC, hidden symbols), linked into the module (tt_model_<name> or
# tt_plugin_<name>), the tests and tools: each source compiled once. Call it from the
# module's directory.
function(_tt_add_impl_library name)
  cmake_parse_arguments(ARG "" "" "PUBLIC_LIBRARIES;PRIVATE_LIBRARIES" ${ARGN})
  set(impl tt_${name}_impl)
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/*.cpp)
  list(REMOVE_ITEM sources ${CMAKE_CURRENT_SOURCE_DIR}/src/module.cpp)
  add_library(${impl} STATIC ${sources})
  target_link_libraries(${impl} PUBLIC tt::core ${ARG_PUBLIC_LIBRARIES} PRIVATE ${ARG_PRIVATE_LIBRARIES})
  target_include_directories(${impl} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
  set_target_properties(${impl} PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET hidden
                                           VISIBILITY_INLINES_HIDDEN ON)
  if(COMMAND tt_use_pch)
    tt_use_pch(${impl})
  endif()
endfunction()

function(tt_add_model_library name)
  cmake_parse_arguments(ARG "" "" "PUBLIC_LIBRARIES;PRIVATE_LIBRARIES" ${ARGN})
  _tt_add_impl_library(${name} PUBLIC_LIBRARIES nlohmann_json::nlohmann_json ${ARG_PUBLIC_LIBRARIES}
                       PRIVATE_LIBRARIES ${ARG_PRIVATE_LIBRARIES})
  tt_add_model(${name} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/src/module.cpp LIBRARIES tt_${name}_impl)
endfunction()

function(tt_add_plugin_library name)
  cmake_parse_arguments(ARG "" "" "PUBLIC_LIBRARIES;PRIVATE_LIBRARIES" ${ARGN})
  _tt_add_impl_library(${name} PUBLIC_LIBRARIES ${ARG_PUBLIC_LIBRARIES} PRIVATE_LIBRARIES ${ARG_PRIVATE_LIBRARIES})
  tt_add_plugin(${name} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/src/module.cpp LIBRARIES tt_${name}_impl)
endfunction()
