# install(): the library, its headers (the generated version.hpp too), the CMake package
# (dlockConfig.cmake) and dlock.pc; the tools built, with their man page and completion.
include(CMakePackageConfigHelpers)

install(TARGETS dlock EXPORT dlockTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/dlock ${PROJECT_BINARY_DIR}/include/dlock DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(dlock_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/dlock)
install(EXPORT dlockTargets NAMESPACE dlock:: DESTINATION ${dlock_cmake_dir})
# A static libdlock brings its private dependencies to the consumer's link: the config finds
# them (dlockConfig.cmake.in), and dlock.pc names them (Requires), as built here.
set(DLOCK_SHARED ${BUILD_SHARED_LIBS})
configure_package_config_file(cmake/dlockConfig.cmake.in ${PROJECT_BINARY_DIR}/dlockConfig.cmake
  INSTALL_DESTINATION ${dlock_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dlockConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dlockConfig.cmake ${PROJECT_BINARY_DIR}/dlockConfigVersion.cmake
  DESTINATION ${dlock_cmake_dir})
if(DLOCK_WITH_ZOOKEEPER AND NOT BUILD_SHARED_LIBS)
  # ZooKeeper's C client ships no CMake config: a static libdlock's config finds it with ours.
  install(FILES cmake/FindZooKeeper.cmake DESTINATION ${dlock_cmake_dir})
endif()

# dlock.pc finds the prefix from its own place (${pcfiledir}), so that `cmake --install --prefix`
# and a relocated install keep working.
set(pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE ${CMAKE_INSTALL_LIBDIR})
  set(DLOCK_PC_PREFIX ${CMAKE_INSTALL_PREFIX})
else()
  file(RELATIVE_PATH up /root/${pc_dir} /root)
  set(DLOCK_PC_PREFIX "\${pcfiledir}/${up}")
endif()
set(DLOCK_PC_REQUIRES)
set(DLOCK_PC_LIBS)
set(DLOCK_PC_BACKENDS "local")
if(DLOCK_WITH_SQLITE)
  list(APPEND DLOCK_PC_REQUIRES sqlite3)
  string(APPEND DLOCK_PC_BACKENDS ", SQLite")
endif()
if(DLOCK_WITH_MYSQL)
  list(APPEND DLOCK_PC_REQUIRES libmariadb)
  string(APPEND DLOCK_PC_BACKENDS ", MySQL/MariaDB")
endif()
if(DLOCK_WITH_REDIS)
  list(APPEND DLOCK_PC_REQUIRES hiredis)
  string(APPEND DLOCK_PC_BACKENDS ", Redis, Redlock")
endif()
if(DLOCK_WITH_ZOOKEEPER)
  string(APPEND DLOCK_PC_BACKENDS ", ZooKeeper")
endif()
if(DLOCK_WITH_POSTGRES)
  list(APPEND DLOCK_PC_REQUIRES libpq)
  string(APPEND DLOCK_PC_BACKENDS ", PostgreSQL")
endif()
if(DLOCK_WITH_ETCD)
  list(APPEND DLOCK_PC_REQUIRES grpc++ protobuf)
  string(APPEND DLOCK_PC_BACKENDS ", etcd")
endif()
if(BUILD_SHARED_LIBS)
  set(DLOCK_PC_REQUIRES)
else()
  # ZooKeeper's C client has no pkg-config file: named in Libs.
  if(DLOCK_WITH_ZOOKEEPER)
    set(DLOCK_PC_LIBS " -lzookeeper_mt")
  endif()
  string(APPEND DLOCK_PC_LIBS " -pthread")
endif()
list(JOIN DLOCK_PC_REQUIRES " " DLOCK_PC_REQUIRES)
configure_file(cmake/dlock.pc.in ${PROJECT_BINARY_DIR}/dlock.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dlock.pc DESTINATION ${pc_dir})

if(DLOCK_BUILD_CLI)
  install(TARGETS dlock_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(FILES ${dlock_completion} DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
  if(dlock_man)
    install(FILES ${dlock_man} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  endif()
endif()
if(DLOCK_BUILD_SERVE)
  install(TARGETS dlock_serve RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
