# `cmake --build --preset release --target package` writes dlock_<version>_<arch>.deb: the
# shared libdlock (SONAME libdlock.so.MAJOR.MINOR), headers, CMake package, dlock.pc, dlock,
# dlock-serve, dlock(1) and the bash completion, in /usr. Its run-time dependencies come from
# dpkg-shlibdeps (Debian: dpkg-dev, file), so a shared libdlock needs no -dev package to run
# or to build against.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dlock)
set(CPACK_PACKAGE_VENDOR "dlock")
set(CPACK_PACKAGE_CONTACT "dlock maintainers <dlock@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed locks: C++20 library, dlock tool (flock(1) for many hosts) and admin page")
set(CPACK_PACKAGE_DESCRIPTION "One set of lock semantics over local, SQLite, MySQL/MariaDB, PostgreSQL, Redis,
Redlock and ZooKeeper stores: leases renewed in the background, fencing tokens, waiters woken by the
store. The dlock tool runs a command under a lock, like flock(1) across hosts;
dlock serve shows and manages locks over HTTP. The C++ library is libdlock.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
if(NOT BUILD_SHARED_LIBS)
  message(STATUS "The package holds a static libdlock: configure with -DBUILD_SHARED_LIBS=ON (the release preset does) for the shared one")
endif()
include(CPack)
