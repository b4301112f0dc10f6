/* findings.js: the findings page's table filtered by paper and by verdict in the reader's browser
   (no server). Loaded on every page by book/_ext/bookweb.py; does nothing where no ".findings"
   block is. Without scripts the menus stay hidden and every row shows. */
document.addEventListener("DOMContentLoaded", () => {
  for (const box of document.querySelectorAll(".findings")) {
    const form = box.querySelector(".findings-filter");
    const rows = Array.from(box.querySelectorAll("tbody tr"));
    if (!form || rows.length === 0) continue;
    const menus = Array.from(form.querySelectorAll("select[data-column]"));
    const shown = form.querySelector(".findings-shown");
    const apply = () => {
      let n = 0;
      for (const row of rows) {
        const keep = menus.every((m) => m.value === "" || row.dataset[m.dataset.column] === m.value);
        row.hidden = !keep;
        n += keep ? 1 : 0;
      }
      if (shown) shown.textContent = `${n} of ${rows.length} rows shown`;
    };
    menus.forEach((m) => m.addEventListener("change", apply));
    form.addEventListener("submit", (event) => event.preventDefault());
    form.hidden = false;
    apply();
  }
});
