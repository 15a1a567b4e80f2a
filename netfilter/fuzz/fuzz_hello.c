/*
 * fuzz_hello.c — libFuzzer target for the relay's parsers (netfilter/src/hello.c): the input is taken as a TLS
 * ClientHello and as an HTTP request head. A name that comes out must be a valid host name; a header length must lie
 * within the input. Build with -DLENSBOX_FUZZ=ON (clang); seeds in corpus/hello.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lb/netparse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char name[LB_DNS_NAME_MAX + 1];
	size_t head = 0;
	if (lb_tls_client_hello_sni(data, size, name) == LB_HELLO_OK && !lb_hostname_valid(name, strlen(name)))
		abort();
	if (lb_http_request_host(data, size, name, &head) == LB_HELLO_OK &&
	    (!lb_hostname_valid(name, strlen(name)) || head > size))
		abort();
	return 0;
}
