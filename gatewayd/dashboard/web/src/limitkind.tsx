// The kind of one limit as a form chooses it (the group editor, the tree's bulk edit): its type and its unit, two
// selects, each named for a screen reader by the form's label of the limit.
export function LimitKindSelects(props: { label: string; type: string; unit: string; onType: (type: string) => void; onUnit: (unit: string) => void }) {
  return (
    <>
      <label>
        <span class="sr-only">{props.label} type</span>
        <select value={props.type} onChange={(e) => props.onType((e.target as HTMLSelectElement).value)}>
          <option value="REQUEST">REQUEST</option>
          <option value="TOKEN">TOKEN</option>
        </select>
      </label>
      <label>
        <span class="sr-only">{props.label} unit</span>
        <select value={props.unit} onChange={(e) => props.onUnit((e.target as HTMLSelectElement).value)}>
          <option value="SECOND">per SECOND</option>
          <option value="MINUTE">per MINUTE</option>
          <option value="DAY">per DAY (usage)</option>
        </select>
      </label>
    </>
  );
}
