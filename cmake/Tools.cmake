# The dlock tool and dlock-serve, with what documents them: a man page made from the tool's own
# --help (help2man) and a bash completion it prints itself, so that neither drifts from it.

find_package(fmt REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)

# What both tools share, compiled once for the two.
if(DLOCK_BUILD_CLI OR DLOCK_BUILD_SERVE)
  add_library(dlock_cli_common OBJECT src/cli/cli_common.cpp src/cli/audit_log.cpp src/cli/store_probe.cpp
    src/cli/fmt_compiled.cpp)
  # fmt's headers without FMT_HEADER_ONLY: fmt_compiled.cpp holds its compiled part.
  target_include_directories(dlock_cli_common SYSTEM PUBLIC
    $<TARGET_PROPERTY:fmt::fmt-header-only,INTERFACE_INCLUDE_DIRECTORIES>)
  target_link_libraries(dlock_cli_common PUBLIC dlock_internal CLI11::CLI11
    nlohmann_json::nlohmann_json PRIVATE dlock_warnings)
endif()

if(DLOCK_BUILD_CLI)
  add_executable(dlock_cli
    src/cli/main.cpp
    src/cli/completion_command.cpp
    src/cli/run_command.cpp
    src/cli/run_arguments.cpp
    src/cli/run_process.cpp
    src/cli/run_signals.cpp
    src/cli/admin_commands.cpp
    src/cli/acquire_keeper.cpp
    src/cli/serve_command.cpp
    src/cli/bench_command.cpp
    src/cli/bench_workers.cpp)
  set_target_properties(dlock_cli PROPERTIES OUTPUT_NAME dlock)
  target_compile_definitions(dlock_cli PRIVATE DLOCK_VERSION="${PROJECT_VERSION}" $<$<BOOL:${DLOCK_WITH_MYSQL}>:DLOCK_WITH_MYSQL=1>
    $<$<BOOL:${DLOCK_WITH_POSTGRES}>:DLOCK_WITH_POSTGRES=1>)
  target_link_libraries(dlock_cli PRIVATE dlock_internal dlock_cli_common dlock_warnings)
  if(DLOCK_STATIC_CLI_EFFECTIVE)
    set_target_properties(dlock_cli PROPERTIES DLOCK_LINK_STATIC ON)
    target_link_options(dlock_cli PRIVATE -static)
    if(DLOCK_WITH_MYSQL)
      # -static picks libmariadb.a, which needs its own dependencies spelled out.
      target_link_libraries(dlock_cli PRIVATE ${MariaDB_STATIC_LIBRARIES})
    endif()
    if(DLOCK_WITH_POSTGRES)
      # libpq's archive and PostgreSQL's own helpers (Debian: postgresql-server-dev-15). Debian
      # has no static GSSAPI (Kerberos) and no static LDAP with its SASL and GnuTLS, so the
      # static tool connects without them: src/cli/static_libpq_without_gss_ldap.c.
      find_library(DLOCK_PQ_ARCHIVE NAMES libpq.a)
      find_library(DLOCK_PGCOMMON_ARCHIVE NAMES libpgcommon_shlib.a PATHS /usr/lib/postgresql/15/lib)
      find_library(DLOCK_PGPORT_ARCHIVE NAMES libpgport_shlib.a PATHS /usr/lib/postgresql/15/lib)
      if(NOT DLOCK_PQ_ARCHIVE OR NOT DLOCK_PGCOMMON_ARCHIVE OR NOT DLOCK_PGPORT_ARCHIVE)
        message(FATAL_ERROR "the static dlock tool with postgres:// needs libpq.a (Debian: libpq-dev) and "
          "libpgcommon_shlib.a, libpgport_shlib.a (Debian: postgresql-server-dev-15); or pass "
          "-DDLOCK_STATIC_CLI=OFF or -DDLOCK_WITH_POSTGRES=OFF")
      endif()
      target_sources(dlock_cli PRIVATE src/cli/static_libpq_without_gss_ldap.c)
      target_link_libraries(dlock_cli PRIVATE ${DLOCK_PQ_ARCHIVE} ${DLOCK_PGCOMMON_ARCHIVE} ${DLOCK_PGPORT_ARCHIVE}
        ssl crypto)
    endif()
    if(DLOCK_WITH_ETCD)
      # Likewise gRPC's and protobuf's archives (Debian ships them): abseil, re2, c-ares, OpenSSL.
      target_link_libraries(dlock_cli PRIVATE ${Grpc_STATIC_LIBRARIES})
    endif()
  endif()
  include(${PROJECT_SOURCE_DIR}/cmake/ToolDocs.cmake)
endif()

if(DLOCK_BUILD_SERVE)
  # dlock-serve, the HTTP server `dlock serve` runs: linked dynamically, as Debian ships
  # cpp-httplib as a shared library only (its pkg-config flags must match that build).
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
  add_executable(dlock_serve src/cli/serve_main.cpp src/cli/admin_api.cpp src/cli/admin_page.cpp
    src/cli/allowed_hosts.cpp src/cli/http_server.cpp)
  set_target_properties(dlock_serve PROPERTIES OUTPUT_NAME dlock-serve)
  target_link_libraries(dlock_serve PRIVATE dlock_cli_common PkgConfig::HTTPLIB dlock_warnings)
  if(DLOCK_BUILD_CLI)
    add_dependencies(dlock_cli dlock_serve)
  endif()
endif()
