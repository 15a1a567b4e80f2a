/* Replays images/fuzz/corpus/layer/ through the layer fuzz target's entry point, so every build (and the ASan/UBSan
 * build in CI) runs the seeds that libFuzzer starts from; -DLENSBOX_FUZZ=ON builds the real fuzzer. Needs root. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../../images/fuzz/fuzz_layer.c" // NOLINT(bugprone-suspicious-include): replays its corpus

static void replay(void **state)
{
	(void)state;
	const char *dir = LENSBOX_SOURCE_DIR "/images/fuzz/corpus/layer";
	DIR *d = opendir(dir);
	assert_non_null(d);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char path[1024];
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		FILE *f = fopen(path, "rb");
		assert_non_null(f);
		static uint8_t buf[1 << 16];
		size_t len = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		assert_int_equal(LLVMFuzzerTestOneInput(buf, len), 0);
		n++;
	}
	closedir(d);
	assert_true(n >= 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(replay) };
	return cmocka_run_group_tests(tests, NULL, NULL);
}
