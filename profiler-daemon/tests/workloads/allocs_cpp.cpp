// C++ allocation workload: after a second asleep, for ever, make_widgets news 16 Widgets of
// 256 B and deletes them, and make_buffer news a 4 KiB array and
// deletes it (operator new and delete, which call malloc and free).
#include <cstring>
#include <unistd.h>

struct Widget {
    char bytes[256];
};

static Widget *volatile widget_sink;
static char *volatile buffer_sink;

__attribute__((noinline)) static void make_widgets() {
    Widget *widgets[16];
    for (auto &widget : widgets) {
        widget = new Widget();
        widget_sink = widget;
    }
    for (auto *widget : widgets) delete widget;
}

__attribute__((noinline)) static void make_buffer() {
    char *buffer = new char[4096];
    std::memset(buffer, 1, 4096);
    buffer_sink = buffer;
    delete[] buffer;
}

int main() {
    usleep(1000 * 1000);
    for (long round = 0;; round++) {
        make_widgets();
        make_buffer();
        if (round % 16 == 0) usleep(200);
    }
}
