# FindZooKeeper: the multi-threaded ZooKeeper C client (Debian: libzookeeper-mt-dev), which
# ships neither a pkg-config file nor a CMake config.
#
#   list(APPEND CMAKE_MODULE_PATH ${PROJECT_SOURCE_DIR}/cmake)
#   find_package(ZooKeeper 3.5 REQUIRED)      # or find_dependency(ZooKeeper) in a config file
#   target_link_libraries(app PRIVATE ZooKeeper::zookeeper_mt)
#   // in the code: #include <zookeeper/zookeeper.h>
#
# Imported targets:
#   ZooKeeper::zookeeper_mt         the shared libzookeeper_mt; its include directory is the
#                                   parent of zookeeper/, and it defines THREADED for its
#                                   users: zookeeper.h declares the synchronous calls (zoo_create,
#                                   zoo_exists, zoo_wexists, ...) only under THREADED
#   ZooKeeper::zookeeper_mt_static  libzookeeper_mt.a, when present (with Threads::Threads)
#
# Result variables:
#   ZooKeeper_FOUND, ZooKeeper_VERSION (ZOO_VERSION of zookeeper_version.h, e.g. 3.8.0),
#   ZooKeeper_INCLUDE_DIRS, ZooKeeper_LIBRARIES
#
# Cache variables (ZooKeeper_ROOT or CMAKE_PREFIX_PATH point the search elsewhere):
#   ZooKeeper_INCLUDE_DIR      the directory holding zookeeper/zookeeper.h
#   ZooKeeper_LIBRARY          the shared library
#   ZooKeeper_STATIC_LIBRARY   the static archive, if present (else ...-NOTFOUND; not required)

find_path(ZooKeeper_INCLUDE_DIR NAMES zookeeper/zookeeper.h)
find_library(ZooKeeper_LIBRARY NAMES zookeeper_mt)
find_library(ZooKeeper_STATIC_LIBRARY NAMES libzookeeper_mt.a)
mark_as_advanced(ZooKeeper_INCLUDE_DIR ZooKeeper_LIBRARY ZooKeeper_STATIC_LIBRARY)

unset(ZooKeeper_VERSION)
if(ZooKeeper_INCLUDE_DIR AND EXISTS "${ZooKeeper_INCLUDE_DIR}/zookeeper/zookeeper_version.h")
  file(STRINGS "${ZooKeeper_INCLUDE_DIR}/zookeeper/zookeeper_version.h" _zookeeper_version_line
       REGEX "^#define[ \t]+ZOO_VERSION[ \t]+\"[0-9.]+\"")
  if(_zookeeper_version_line MATCHES "\"([0-9.]+)\"")
    set(ZooKeeper_VERSION "${CMAKE_MATCH_1}")
  endif()
  unset(_zookeeper_version_line)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(ZooKeeper
  REQUIRED_VARS ZooKeeper_LIBRARY ZooKeeper_INCLUDE_DIR
  VERSION_VAR ZooKeeper_VERSION
  REASON_FAILURE_MESSAGE "install the ZooKeeper C client (Debian: libzookeeper-mt-dev)")

if(ZooKeeper_FOUND)
  set(ZooKeeper_INCLUDE_DIRS "${ZooKeeper_INCLUDE_DIR}")
  set(ZooKeeper_LIBRARIES "${ZooKeeper_LIBRARY}")
  if(NOT TARGET ZooKeeper::zookeeper_mt)
    add_library(ZooKeeper::zookeeper_mt UNKNOWN IMPORTED)
    set_target_properties(ZooKeeper::zookeeper_mt PROPERTIES
      IMPORTED_LOCATION "${ZooKeeper_LIBRARY}"
      IMPORTED_LINK_INTERFACE_LANGUAGES C
      INTERFACE_INCLUDE_DIRECTORIES "${ZooKeeper_INCLUDE_DIR}"
      INTERFACE_COMPILE_DEFINITIONS THREADED)
  endif()
  if(ZooKeeper_STATIC_LIBRARY AND NOT TARGET ZooKeeper::zookeeper_mt_static)
    # The archive's own threads (I/O and completion) need libpthread at the final link.
    find_package(Threads QUIET)
    add_library(ZooKeeper::zookeeper_mt_static STATIC IMPORTED)
    set_target_properties(ZooKeeper::zookeeper_mt_static PROPERTIES
      IMPORTED_LOCATION "${ZooKeeper_STATIC_LIBRARY}"
      IMPORTED_LINK_INTERFACE_LANGUAGES C
      INTERFACE_INCLUDE_DIRECTORIES "${ZooKeeper_INCLUDE_DIR}"
      INTERFACE_COMPILE_DEFINITIONS THREADED)
    if(TARGET Threads::Threads)
      set_property(TARGET ZooKeeper::zookeeper_mt_static PROPERTY INTERFACE_LINK_LIBRARIES Threads::Threads)
    endif()
  endif()
endif()
