# phos_write_target_links(<file>)
#
# Writes one line per link between two of the project's own targets, as CMake holds them once
# every folder is configured: "<target>\t<its folder>\t<linked target>\t<its folder>" (folders
# absolute), from each target's LINK_LIBRARIES and INTERFACE_LINK_LIBRARIES. Imported targets
# (Debian packages) are left out. The Layering test (tests/layering) checks every line against
# the allowed graph in cmake/layers.txt. Call it at the end of the top-level CMakeLists.txt.
function(phos_write_target_links file)
  set(pending ${PROJECT_SOURCE_DIR})
  set(targets "")
  while(pending)
    list(POP_FRONT pending dir)
    get_property(subdirectories DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    get_property(dir_targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    list(APPEND pending ${subdirectories})
    list(APPEND targets ${dir_targets})
  endwhile()

  set(edges "")
  foreach(target IN LISTS targets)
    get_target_property(folder ${target} SOURCE_DIR)
    set(linked "")
    foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(items ${target} ${property})
      if(items)
        list(APPEND linked ${items})
      endif()
    endforeach()
    foreach(item IN LISTS linked)
      # A static library's private links appear in its interface as $<LINK_ONLY:item>; links
      # made from another folder are framed by ::@(directory-id) markers.
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
      if(item MATCHES "^::@" OR NOT TARGET "${item}")
        continue()
      endif()
      get_target_property(imported ${item} IMPORTED)
      if(imported)
        continue()
      endif()
      get_target_property(aliased ${item} ALIASED_TARGET)
      if(aliased)
        set(item ${aliased})
      endif()
      get_target_property(item_folder ${item} SOURCE_DIR)
      list(APPEND edges "${target}\t${folder}\t${item}\t${item_folder}")
    endforeach()
  endforeach()
  # A public link is in both properties: one line each.
  list(REMOVE_DUPLICATES edges)
  list(JOIN edges "\n" lines)
  file(WRITE ${file} "${lines}\n")
endfunction()
