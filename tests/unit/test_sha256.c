/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of SHA-256: the FIPS 180-4 examples, and lengths around the
 * block and padding boundaries (55, 56, 63, 64, 65, 119 bytes), where a
 * padding mistake shows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sha256.h"

static const char *hex_of(const void *p, size_t len)
{
	static char out[SHA256_HEX_LEN];
	uint8_t d[SHA256_LEN];

	sha256(p, len, d);
	sha256_hex(d, out);
	return out;
}

static void test_examples(void **unused)
{
	static const char two[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";

	assert_string_equal(hex_of("", 0),
			    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	assert_string_equal(hex_of("abc", 3),
			    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_string_equal(hex_of(two, sizeof(two) - 1),
			    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_boundaries(void **unused)
{
	static const struct {
		size_t len;
		const char *hex;
	} cases[] = {
		{ 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318" },
		{ 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a" },
		{ 63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34" },
		{ 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb" },
		{ 65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0" },
		{ 119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb" },
		{ 1000, "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3" },
	};
	char a[1000];

	memset(a, 'a', sizeof(a));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_string_equal(hex_of(a, cases[i].len), cases[i].hex);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_examples),
		cmocka_unit_test(test_boundaries),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
