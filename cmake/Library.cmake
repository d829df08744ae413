# The library. Its sources compile once, into dlock_objects, from which two libraries are made:
#  - dlock (dlock::dlock), the public one, static or shared (BUILD_SHARED_LIBS): a shared build
#    exports only the DLOCK_EXPORT declarations and carries a versioned SONAME;
#  - dlock_internal, a static archive for dlock's own tools and tests, which use internals
#    (core::Url, the backend registry) that a shared libdlock does not export.

find_package(Threads REQUIRED)
# The static dlock tool links SQLite's archive; everything else links what find_package(SQLite3)
# finds. (Builds configured before had SQLite3_LIBRARY set to that archive, which a shared
# libdlock cannot link.)
if(DLOCK_WITH_SQLITE)
  if(DEFINED DLOCK_SQLITE3_ARCHIVE AND SQLite3_LIBRARY STREQUAL DLOCK_SQLITE3_ARCHIVE)
    unset(SQLite3_LIBRARY CACHE)
  endif()
  find_package(SQLite3 REQUIRED)
  if(DLOCK_STATIC_CLI_EFFECTIVE)
    find_library(DLOCK_SQLITE3_ARCHIVE NAMES libsqlite3.a)
    if(NOT DLOCK_SQLITE3_ARCHIVE)
      message(FATAL_ERROR "DLOCK_STATIC_CLI needs libsqlite3.a (Debian: libsqlite3-dev); or pass -DDLOCK_STATIC_CLI=OFF")
    endif()
  endif()
endif()
if(DLOCK_WITH_MYSQL OR DLOCK_WITH_REDIS OR DLOCK_WITH_ETCD)
  find_package(PkgConfig REQUIRED)
endif()
if(DLOCK_WITH_MYSQL)
  pkg_check_modules(MariaDB REQUIRED IMPORTED_TARGET libmariadb)
endif()
if(DLOCK_WITH_REDIS)
  pkg_check_modules(Hiredis REQUIRED IMPORTED_TARGET hiredis)
endif()
if(DLOCK_WITH_POSTGRES)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(PQ REQUIRED IMPORTED_TARGET libpq)
endif()
if(DLOCK_WITH_ZOOKEEPER)
  list(APPEND CMAKE_MODULE_PATH ${PROJECT_SOURCE_DIR}/cmake)
  find_package(ZooKeeper 3.5 REQUIRED)
endif()
if(DLOCK_WITH_ETCD)
  pkg_check_modules(Grpc REQUIRED IMPORTED_TARGET grpc++ protobuf)
  find_program(DLOCK_PROTOC protoc REQUIRED)
  find_program(DLOCK_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
endif()

configure_file(${PROJECT_SOURCE_DIR}/cmake/version.hpp.in ${PROJECT_BINARY_DIR}/include/dlock/version.hpp @ONLY)

add_library(dlock_objects OBJECT
  src/core/activity.cpp
  src/core/client.cpp
  src/core/client_state.cpp
  src/core/lease_life.cpp
  src/core/mutex.cpp
  src/core/multi_lock.cpp
  src/core/lease_sets.cpp
  src/core/key_template.cpp
  src/core/duration.cpp
  src/core/errors.cpp
  src/core/log.cpp
  src/core/owner.cpp
  src/core/renewal.cpp
  src/core/percent.cpp
  src/core/url.cpp
  src/core/validate.cpp
  src/core/version.cpp
  src/backends/registry.cpp
  src/backends/local/local_backend.cpp)
if(DLOCK_WITH_MYSQL)
  target_sources(dlock_objects PRIVATE
    src/backends/mysql/common.cpp
    src/backends/mysql/connection.cpp
    src/backends/mysql/doorbell.cpp
    src/backends/mysql/lease_mode.cpp
    src/backends/mysql/lease_sql.cpp
    src/backends/mysql/lease_shared.cpp
    src/backends/mysql/mysql_backend.cpp
    src/backends/mysql/pool.cpp
    src/backends/mysql/row_mode.cpp
    src/backends/mysql/schema.cpp
    src/backends/mysql/session_mode.cpp
    src/backends/mysql/session_shared.cpp
    src/backends/mysql/session_sql.cpp
    src/backends/mysql/shared_holds.cpp)
  target_include_directories(dlock_objects PRIVATE ${MariaDB_INCLUDE_DIRS})
  target_compile_definitions(dlock_objects PRIVATE DLOCK_WITH_MYSQL=1)
endif()
if(DLOCK_WITH_REDIS)
  # The Lua scripts are files, embedded as string constants at build time: redis://'s, and
  # redlock://'s own (which run redis://'s common parts too).
  function(dlock_embed_lua header namespace dir common)
    list(TRANSFORM ARGN APPEND .lua OUTPUT_VARIABLE files)
    list(TRANSFORM files PREPEND ${dir}/)
    string(REPLACE ";" "," names "${ARGN}")
    string(REPLACE ";" "," common_list "${common}")
    add_custom_command(OUTPUT ${header}
      COMMAND ${CMAKE_COMMAND} -DDIR=${dir} -DSCRIPTS=${names} -DCOMMON=${common_list} -DNAMESPACE=${namespace}
        -DOUT=${header} -P ${PROJECT_SOURCE_DIR}/cmake/embed_lua.cmake
      DEPENDS ${files} ${common} ${PROJECT_SOURCE_DIR}/cmake/embed_lua.cmake
      COMMENT "Embedding the Lua scripts of ${dir}" VERBATIM)
  endfunction()
  set(redis_lua ${PROJECT_SOURCE_DIR}/src/backends/redis/lua)
  set(redlock_lua ${PROJECT_SOURCE_DIR}/src/backends/redlock/lua)
  set(generated ${PROJECT_BINARY_DIR}/generated/backends)
  set(redis_common "${redis_lua}/common.lua;${redis_lua}/holders.lua;${redis_lua}/queue.lua;${redis_lua}/attempt.lua")
  dlock_embed_lua(${generated}/redis/lua_scripts.hpp dlock::backends::redis::lua ${redis_lua}
    "${redis_common}"
    acquire acquire_set refresh leave renew release release_set inspect force_release list collect add_activity)
  dlock_embed_lua(${generated}/redlock/lua_scripts.hpp dlock::backends::redlock::lua ${redlock_lua}
    "${redis_common};${redlock_lua}/bells.lua"
    acquire adopt release release_set force_release sleep leave)
  target_sources(dlock_objects PRIVATE
    src/backends/redis/connection.cpp
    src/backends/redis/keys.cpp
    src/backends/redis/redis_backend.cpp
    src/backends/redis/sets.cpp
    src/backends/redis/subscriber.cpp
    src/backends/redlock/activity.cpp
    src/backends/redlock/agreement.cpp
    src/backends/redlock/redlock_backend.cpp
    src/backends/redlock/server_bell.cpp
    src/backends/redlock/servers.cpp
    src/backends/redlock/settings.cpp
    ${generated}/redis/lua_scripts.hpp
    ${generated}/redlock/lua_scripts.hpp)
  target_include_directories(dlock_objects PRIVATE ${PROJECT_BINARY_DIR}/generated)
  target_compile_definitions(dlock_objects PRIVATE DLOCK_WITH_REDIS=1)
endif()
if(DLOCK_WITH_ZOOKEEPER)
  target_sources(dlock_objects PRIVATE
    src/backends/zookeeper/activity.cpp
    src/backends/zookeeper/admin.cpp
    src/backends/zookeeper/errors.cpp
    src/backends/zookeeper/held_nodes.cpp
    src/backends/zookeeper/nodes.cpp
    src/backends/zookeeper/queue.cpp
    src/backends/zookeeper/session.cpp
    src/backends/zookeeper/sets.cpp
    src/backends/zookeeper/settings.cpp
    src/backends/zookeeper/zookeeper_backend.cpp)
  target_include_directories(dlock_objects PRIVATE ${ZooKeeper_INCLUDE_DIRS})
  # zookeeper.h declares the multi-threaded client's API only with THREADED.
  target_compile_definitions(dlock_objects PRIVATE DLOCK_WITH_ZOOKEEPER=1 THREADED)
endif()
if(DLOCK_WITH_POSTGRES)
  target_sources(dlock_objects PRIVATE
    src/backends/postgres/activity.cpp
    src/backends/postgres/common.cpp
    src/backends/postgres/connection.cpp
    src/backends/postgres/lease_mode.cpp
    src/backends/postgres/lease_sql.cpp
    src/backends/postgres/listen_bell.cpp
    src/backends/postgres/pool.cpp
    src/backends/postgres/postgres_backend.cpp
    src/backends/postgres/session_mode.cpp
    src/backends/postgres/session_sql.cpp
    src/backends/postgres/session_shared_sql.cpp
    src/backends/postgres/session_waiter.cpp
    src/backends/postgres/shared_sql.cpp
    src/backends/postgres/store.cpp)
  target_include_directories(dlock_objects PRIVATE ${PQ_INCLUDE_DIRS})
  target_compile_definitions(dlock_objects PRIVATE DLOCK_WITH_POSTGRES=1)
endif()
if(DLOCK_WITH_ETCD)
  # The etcd backend's objects apart: the code protoc and grpc_cpp_plugin generate from
  # rpc.proto (the subset of etcd's API used) compiles without dlock's warnings, and only
  # these files see it. The registry alone needs to know the backend is there.
  set(etcd_generated ${PROJECT_BINARY_DIR}/generated/etcd)
  set(etcd_proto ${PROJECT_SOURCE_DIR}/src/backends/etcd/proto/rpc.proto)
  add_custom_command(
    OUTPUT ${etcd_generated}/rpc.pb.cc ${etcd_generated}/rpc.pb.h ${etcd_generated}/rpc.grpc.pb.cc
      ${etcd_generated}/rpc.grpc.pb.h
    COMMAND ${CMAKE_COMMAND} -E make_directory ${etcd_generated}
    COMMAND ${DLOCK_PROTOC} -I ${PROJECT_SOURCE_DIR}/src/backends/etcd/proto --cpp_out=${etcd_generated}
      --grpc_out=${etcd_generated} --plugin=protoc-gen-grpc=${DLOCK_GRPC_CPP_PLUGIN} rpc.proto
    DEPENDS ${etcd_proto} COMMENT "Generating etcd's gRPC stubs from rpc.proto" VERBATIM)
  add_library(dlock_etcd_proto OBJECT ${etcd_generated}/rpc.pb.cc ${etcd_generated}/rpc.grpc.pb.cc)
  # SYSTEM: the generated headers are not held to dlock's warnings wherever they are included.
  target_include_directories(dlock_etcd_proto SYSTEM PUBLIC ${etcd_generated})
  target_compile_options(dlock_etcd_proto PUBLIC ${Grpc_CFLAGS_OTHER})
  add_library(dlock_etcd OBJECT
    src/backends/etcd/activity.cpp
    src/backends/etcd/admin.cpp
    src/backends/etcd/connection.cpp
    src/backends/etcd/errors.cpp
    src/backends/etcd/etcd_backend.cpp
    src/backends/etcd/held_nodes.cpp
    src/backends/etcd/holders.cpp
    src/backends/etcd/nodes.cpp
    src/backends/etcd/queue.cpp
    src/backends/etcd/queue_waiter.cpp
    src/backends/etcd/repairs.cpp
    src/backends/etcd/session.cpp
    src/backends/etcd/settings.cpp
    src/backends/etcd/watches.cpp)
  target_include_directories(dlock_etcd SYSTEM PRIVATE ${etcd_generated})
  target_include_directories(dlock_etcd PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(dlock_etcd PRIVATE ${Grpc_CFLAGS_OTHER})
  target_link_libraries(dlock_etcd PRIVATE dlock_warnings)
  add_dependencies(dlock_etcd dlock_etcd_proto)
  foreach(target dlock_etcd_proto dlock_etcd)
    set_target_properties(${target} PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
      POSITION_INDEPENDENT_CODE "${BUILD_SHARED_LIBS}")
  endforeach()
  set_property(SOURCE src/backends/registry.cpp APPEND PROPERTY COMPILE_DEFINITIONS DLOCK_WITH_ETCD=1)
endif()
if(DLOCK_WITH_SQLITE)
  target_sources(dlock_objects PRIVATE
    src/backends/sqlite/connection.cpp
    src/backends/sqlite/errors.cpp
    src/backends/sqlite/host.cpp
    src/backends/sqlite/lock_sets.cpp
    src/backends/sqlite/rows.cpp
    src/backends/sqlite/schema.cpp
    src/backends/sqlite/shared_holds.cpp
    src/backends/sqlite/sqlite_backend.cpp
    src/backends/sqlite/wake_board.cpp)
  target_include_directories(dlock_objects PRIVATE ${SQLite3_INCLUDE_DIRS})
  target_compile_definitions(dlock_objects PRIVATE DLOCK_WITH_SQLITE=1)
endif()
set_target_properties(dlock_objects PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
  POSITION_INDEPENDENT_CODE "${BUILD_SHARED_LIBS}")
target_include_directories(dlock_objects PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(dlock_objects PRIVATE dlock_warnings)

# What compiling against dlock's headers takes: the same for both libraries and the objects.
function(dlock_usage_requirements target)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_link_libraries(${target} PUBLIC Threads::Threads)
  if(NOT BUILD_SHARED_LIBS)
    # Keeps a static libdlock's symbols out of the exports of a consumer's own shared library.
    target_compile_definitions(${target} PUBLIC DLOCK_STATIC_DEFINE)
  endif()
endfunction()
dlock_usage_requirements(dlock_objects)
if(DLOCK_WITH_ETCD)
  dlock_usage_requirements(dlock_etcd)
endif()

add_library(dlock $<TARGET_OBJECTS:dlock_objects>)
if(DLOCK_WITH_ETCD)
  target_sources(dlock PRIVATE $<TARGET_OBJECTS:dlock_etcd> $<TARGET_OBJECTS:dlock_etcd_proto>)
endif()
add_library(dlock::dlock ALIAS dlock)
dlock_usage_requirements(dlock)
# 0.x: any minor release may change the ABI (dlockConfigVersion.cmake says SameMinorVersion),
# so the SONAME names major.minor: libdlock.so.0.1.
set_target_properties(dlock PROPERTIES VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR} EXPORT_NAME dlock)
# The imported targets dlockConfig.cmake makes again for a static libdlock's consumers.
if(DLOCK_WITH_SQLITE)
  target_link_libraries(dlock PRIVATE SQLite::SQLite3)
endif()
if(DLOCK_WITH_MYSQL)
  target_link_libraries(dlock PRIVATE PkgConfig::MariaDB)
endif()
if(DLOCK_WITH_REDIS)
  target_link_libraries(dlock PRIVATE PkgConfig::Hiredis)
endif()
if(DLOCK_WITH_ZOOKEEPER)
  target_link_libraries(dlock PRIVATE ZooKeeper::zookeeper_mt)
endif()
if(DLOCK_WITH_POSTGRES)
  target_link_libraries(dlock PRIVATE PkgConfig::PQ)
endif()
if(DLOCK_WITH_ETCD)
  target_link_libraries(dlock PRIVATE PkgConfig::Grpc)
endif()

# Linking objects directly adds them to dlock_internal; its consumers get the usage requirements.
# EXCLUDE_FROM_ALL: built only for the tools and tests that link it.
# A consumer with the DLOCK_LINK_STATIC property (the -static dlock tool) gets SQLite's archive;
# MariaDB and hiredis go by name, so that -static picks their archives.
add_library(dlock_internal STATIC EXCLUDE_FROM_ALL)
target_link_libraries(dlock_internal PUBLIC dlock_objects)
target_include_directories(dlock_internal PUBLIC ${PROJECT_SOURCE_DIR}/src)
set(static_link $<BOOL:$<TARGET_PROPERTY:DLOCK_LINK_STATIC>>)
if(DLOCK_WITH_SQLITE)
  target_link_libraries(dlock_internal PUBLIC
    $<${static_link}:${DLOCK_SQLITE3_ARCHIVE}> $<${static_link}:m>
    $<${static_link}:${CMAKE_DL_LIBS}> $<$<NOT:${static_link}>:SQLite::SQLite3>)
endif()
if(DLOCK_WITH_MYSQL)
  target_link_libraries(dlock_internal PUBLIC ${MariaDB_LIBRARIES})
endif()
if(DLOCK_WITH_REDIS)
  target_link_libraries(dlock_internal PUBLIC ${Hiredis_LIBRARIES})
endif()
if(DLOCK_WITH_ZOOKEEPER)
  # By name, like MariaDB and hiredis, so that the -static tool picks the archive.
  target_link_libraries(dlock_internal PUBLIC zookeeper_mt)
endif()
if(DLOCK_WITH_POSTGRES)
  # The -static tool links libpq's archive itself (cmake/Tools.cmake).
  target_link_libraries(dlock_internal PUBLIC $<$<NOT:${static_link}>:PkgConfig::PQ>)
endif()
if(DLOCK_WITH_ETCD)
  target_link_libraries(dlock_internal PUBLIC dlock_etcd dlock_etcd_proto ${Grpc_LIBRARIES})
endif()
