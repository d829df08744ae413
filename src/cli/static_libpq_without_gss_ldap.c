/* The statically linked dlock tool links libpq's archive, whose Debian build calls GSSAPI
 * (Kerberos authentication and encryption) and LDAP (connection service lookups). Debian ships
 * neither as a static library, so the static tool has these in their place: each fails as the
 * library does when it has no credentials or cannot reach a directory. libpq then goes on
 * without GSSAPI encryption (dlock asks for none: gssencmode=disable), and reports a server
 * that demands Kerberos authentication, or an ldap:// service entry, as an error. dlock's
 * library and every dynamically linked program use the real libraries. */
#include <stddef.h>
#include <stdint.h>

typedef uint32_t OM_uint32;
typedef void* opaque;

/* GSS_S_FAILURE: (13 << 16), a routine error, "unspecified failure". */
#define DLOCK_GSS_FAILURE ((OM_uint32)13u << 16)

static OM_uint32 unsupported(OM_uint32* minor) {
  if (minor != NULL) *minor = 0;
  return DLOCK_GSS_FAILURE;
}

opaque GSS_C_NT_HOSTBASED_SERVICE = NULL;

OM_uint32 gss_acquire_cred(OM_uint32* minor, opaque a, OM_uint32 b, opaque c, int d, opaque* e, opaque* f,
                           OM_uint32* g) {
  (void)a, (void)b, (void)c, (void)d, (void)e, (void)f, (void)g;
  return unsupported(minor);
}
OM_uint32 gss_delete_sec_context(OM_uint32* minor, opaque* a, opaque b) {
  (void)a, (void)b;
  if (minor != NULL) *minor = 0;
  return 0;
}
OM_uint32 gss_display_status(OM_uint32* minor, OM_uint32 a, int b, opaque c, OM_uint32* d, opaque e) {
  (void)a, (void)b, (void)c, (void)d, (void)e;
  return unsupported(minor);
}
OM_uint32 gss_import_name(OM_uint32* minor, opaque a, opaque b, opaque* c) {
  (void)a, (void)b, (void)c;
  return unsupported(minor);
}
OM_uint32 gss_init_sec_context(OM_uint32* minor, opaque a, opaque* b, opaque c, opaque d, OM_uint32 e, OM_uint32 f,
                               opaque g, opaque h, opaque* i, opaque j, OM_uint32* k, OM_uint32* l) {
  (void)a, (void)b, (void)c, (void)d, (void)e, (void)f, (void)g, (void)h, (void)i, (void)j, (void)k, (void)l;
  return unsupported(minor);
}
OM_uint32 gss_release_buffer(OM_uint32* minor, opaque a) {
  (void)a;
  if (minor != NULL) *minor = 0;
  return 0;
}
OM_uint32 gss_release_cred(OM_uint32* minor, opaque* a) {
  (void)a;
  if (minor != NULL) *minor = 0;
  return 0;
}
OM_uint32 gss_release_name(OM_uint32* minor, opaque* a) {
  (void)a;
  if (minor != NULL) *minor = 0;
  return 0;
}
OM_uint32 gss_unwrap(OM_uint32* minor, opaque a, opaque b, opaque c, int* d, OM_uint32* e) {
  (void)a, (void)b, (void)c, (void)d, (void)e;
  return unsupported(minor);
}
OM_uint32 gss_wrap(OM_uint32* minor, opaque a, int b, OM_uint32 c, opaque d, int* e, opaque f) {
  (void)a, (void)b, (void)c, (void)d, (void)e, (void)f;
  return unsupported(minor);
}
OM_uint32 gss_wrap_size_limit(OM_uint32* minor, opaque a, int b, OM_uint32 c, OM_uint32 d, OM_uint32* e) {
  (void)a, (void)b, (void)c, (void)d, (void)e;
  return unsupported(minor);
}

/* LDAP: no directory can be opened. */
opaque ldap_init(const char* host, int port) {
  (void)host, (void)port;
  return NULL;
}
int ldap_set_option(opaque ld, int option, const void* value) {
  (void)ld, (void)option, (void)value;
  return -1;
}
int ldap_simple_bind(opaque ld, const char* who, const char* password) {
  (void)ld, (void)who, (void)password;
  return -1;
}
int ldap_search_st(opaque ld, const char* base, int scope, const char* filter, char** attrs, int attrsonly,
                   opaque timeout, opaque* result) {
  (void)ld, (void)base, (void)scope, (void)filter, (void)attrs, (void)attrsonly, (void)timeout, (void)result;
  return -1;
}
int ldap_result(opaque ld, int id, int all, opaque timeout, opaque* result) {
  (void)ld, (void)id, (void)all, (void)timeout, (void)result;
  return -1;
}
int ldap_count_entries(opaque ld, opaque result) {
  (void)ld, (void)result;
  return 0;
}
opaque ldap_first_entry(opaque ld, opaque result) {
  (void)ld, (void)result;
  return NULL;
}
opaque* ldap_get_values_len(opaque ld, opaque entry, const char* attr) {
  (void)ld, (void)entry, (void)attr;
  return NULL;
}
void ldap_value_free_len(opaque* values) { (void)values; }
int ldap_msgfree(opaque message) {
  (void)message;
  return 0;
}
int ldap_unbind(opaque ld) {
  (void)ld;
  return 0;
}
char* ldap_err2string(int error) {
  (void)error;
  return (char*)"LDAP is not available in the statically linked dlock tool";
}
