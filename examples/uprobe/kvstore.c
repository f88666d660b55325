// SPDX-License-Identifier: Apache-2.0
/* A tiny key-value request parser, the user-space side of the uprobe example:
 * `kvstore "SET key value" "GET key" ...` handles each request in order and
 * prints the reply. parse_request() returns the command code or -1. */
#include <stdio.h>
#include <string.h>

enum { CMD_GET = 1, CMD_SET = 2, CMD_DEL = 3 };

static char keys[16][32], values[16][64];
static int used;

__attribute__((noinline)) int parse_request(const char *req, char *key, char *value)
{
	char cmd[8];
	int n = sscanf(req, "%7s %31s %63s", cmd, key, value);

	if (n >= 2 && !strcmp(cmd, "GET"))
		return CMD_GET;
	if (n == 3 && !strcmp(cmd, "SET"))
		return CMD_SET;
	if (n >= 2 && !strcmp(cmd, "DEL"))
		return CMD_DEL;
	return -1;
}

static int find(const char *key)
{
	for (int i = 0; i < used; i++)
		if (!strcmp(keys[i], key))
			return i;
	return -1;
}

__attribute__((noinline)) const char *handle(const char *req)
{
	char key[32] = "", value[64] = "";
	int i;

	switch (parse_request(req, key, value)) {
	case CMD_GET:
		i = find(key);
		return i < 0 ? "(nil)" : values[i];
	case CMD_SET:
		i = find(key);
		if (i < 0 && used < 16)
			i = used++;
		if (i < 0)
			return "ERR full";
		strcpy(keys[i], key);
		strcpy(values[i], value);
		return "OK";
	case CMD_DEL:
		i = find(key);
		if (i >= 0)
			keys[i][0] = 0;
		return i < 0 ? "0" : "1";
	}
	return "ERR syntax";
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		printf("%s\n", handle(argv[i]));
	return 0;
}
